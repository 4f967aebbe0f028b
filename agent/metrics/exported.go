package metrics

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/meshready"
)

// A Family is one metric family meshlet exports: its name and type
// (counter, gauge, histogram, summary, untyped), as /metrics gives them.
type Family struct {
	Name string
	Type string
}

// Exported is every metric family a meshlet can export: NewRegistry's
// (the Go and process collectors among them), New's with an API server,
// the DRA plugin's, the container gate's, the node taint's and the node
// settings'. It runs those same registrations on a registry of its own,
// with stand-ins for what they read, and gathers it: a metric renamed or
// added there is renamed or added here. Sorted by name.
func Exported() ([]Family, error) {
	reg := NewRegistry()
	m := New(reg, standIn{}, standIn{}, &kube.Watcher{}, nil)
	// Label values that only appear once set.
	m.Mode("nri")
	_ = DRAPrepareObserver(reg)
	_ = GateObserver(reg)
	RegisterDRA(reg, standIn{}, standIn{})
	RegisterNodeReadiness(reg, standIn{})
	_ = SettingsValid(reg, []kube.ObjectRef{{Namespace: "meshlet-system", Name: "meshlet-settings"}})
	mfs, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	var out []Family
	for _, mf := range mfs {
		out = append(out, Family{Name: mf.GetName(), Type: strings.ToLower(mf.GetType().String())})
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// standIn is what Exported's registrations read: nothing running.
type standIn struct{}

func (standIn) Pods() []enroll.PodStatus                  { return nil }
func (standIn) Retrying() int                             { return 0 }
func (standIn) Connections() int                          { return 0 }
func (standIn) Refused() int                              { return 0 }
func (standIn) DeviceReady() bool                         { return false }
func (standIn) Refusals() uint64                          { return 0 }
func (standIn) Len() int                                  { return 0 }
func (standIn) Published() (meshready.State, bool, error) { return meshready.State{}, false, nil }
