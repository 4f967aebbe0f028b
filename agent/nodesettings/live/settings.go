// Package live holds the node's settings while meshlet runs: the flags'
// values with the NodeSettings document of each --config-map merged over
// them, in order. A changed ConfigMap applies at once; one whose document
// cannot be used keeps its last good document, which the state directory
// keeps across restarts.
package live

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/nodesettings"
)

// Where a settings source stands, as /debug/settings and the logs say it.
const (
	// sourcePending: not read from the API server yet; its last good
	// document (saved in --state-dir) applies meanwhile.
	sourcePending = "pending"
	sourceApplied = "applied"
	// sourceAbsent: the ConfigMap does not exist; it gives nothing.
	sourceAbsent = "absent"
	// sourceInvalid: the ConfigMap's document cannot be used; its last
	// good document applies.
	sourceInvalid = "invalid"
)

// configMapSource is one --config-map: where its document stands.
type configMapSource struct {
	ref   kube.ObjectRef
	state string
	// resourceVersion is the ConfigMap's version last read.
	resourceVersion string
	err             error
	// good is the last document of this ConfigMap that could be used.
	good *nodesettings.Document
}

// Settings are the node's effective settings: the flags' values with
// the document of each --config-map merged over them, in order (a later
// one wins). A ConfigMap that changes is applied at once; one whose
// document cannot be used keeps the last good one, which --state-dir keeps
// across restarts; a deleted one no longer gives anything.
type Settings struct {
	flags    nodesettings.Values
	stateDir string

	mu        sync.Mutex
	hooks     Hooks
	sources   []*configMapSource
	effective nodesettings.Values
}

// Hooks are what Settings tells of what it reads; a nil hook is skipped.
type Hooks struct {
	// Apply puts new settings into effect.
	Apply func(ctx context.Context, v nodesettings.Values)
	// Invalid reports a document that cannot be used (an event on the
	// ConfigMap); Valid (the metric) is told where each source stands.
	Invalid func(ref kube.ObjectRef, uid types.UID, err error)
	Valid   func(ref kube.ObjectRef, ok bool)
}

// SetHooks sets the hooks; call it before the first Observe.
func (s *Settings) SetHooks(h Hooks) {
	if h.Apply == nil {
		h.Apply = func(context.Context, nodesettings.Values) {}
	}
	if h.Invalid == nil {
		h.Invalid = func(kube.ObjectRef, types.UID, error) {}
	}
	if h.Valid == nil {
		h.Valid = func(kube.ObjectRef, bool) {}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = h
}

// New starts from the flags' values and the last good documents stateDir
// holds for the ConfigMaps refs names (a saved document of a ConfigMap no
// longer named is dropped at the next save).
func New(ctx context.Context, flags nodesettings.Values, stateDir string, refs []kube.ObjectRef) *Settings {
	logger := klog.FromContext(ctx)
	s := &Settings{flags: flags, stateDir: stateDir}
	s.SetHooks(Hooks{})
	saved, err := Load(stateDir)
	if err != nil {
		logger.Error(err, "Ignoring the saved node settings: until the API server answers, the flags' settings apply")
	}
	for _, ref := range refs {
		src := &configMapSource{ref: ref, state: sourcePending, good: saved[ref.String()]}
		s.sources = append(s.sources, src)
	}
	s.effective = s.merge()
	if len(s.sources) > 0 {
		fromSaved := 0
		for _, src := range s.sources {
			if src.good != nil {
				fromSaved++
			}
		}
		logger.Info("Node settings until the ConfigMaps are read", "configMaps", refs, "savedDocuments", fromSaved, "settings", s.effective)
	}
	return s
}

// Values returns the effective settings.
func (s *Settings) Values() nodesettings.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effective.Clone()
}

func (s *Settings) merge() nodesettings.Values {
	docs := make([]*nodesettings.Document, len(s.sources))
	for i, src := range s.sources {
		docs[i] = src.good
	}
	return nodesettings.Merge(s.flags, docs...)
}

// Observe reads source i's ConfigMap as it is now (read returns nil when
// it does not exist) and, if the effective settings change, applies them.
// It reads under the lock: of two callers (an informer's event, the read
// after the first sync), the later always sees the newer ConfigMap.
func (s *Settings) Observe(ctx context.Context, i int, read func() *kube.ConfigMap) {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	src := s.sources[i]
	cm := read()
	good := src.good
	switch {
	case cm == nil:
		if src.state != sourceAbsent {
			logger.Info("Node settings ConfigMap does not exist: it gives no settings", "configMap", src.ref)
		}
		src.state, src.resourceVersion, src.err, src.good = sourceAbsent, "", nil, nil
		s.hooks.Valid(src.ref, true)
	case cm.ResourceVersion == src.resourceVersion && src.state != sourcePending:
		return // a resync: nothing new
	default:
		src.resourceVersion = cm.ResourceVersion
		doc, err := nodesettings.Decode(cm.Data, cm.Keys)
		if err != nil {
			err = fmt.Errorf("ConfigMap %s (resourceVersion %s): %w", src.ref, cm.ResourceVersion, err)
			src.state, src.err = sourceInvalid, err
			logger.Error(err, "Node settings document cannot be used; "+src.keeps(), "configMap", src.ref)
			s.hooks.Invalid(src.ref, cm.UID, fmt.Errorf("%w; %s", err, src.keeps()))
			s.hooks.Valid(src.ref, false)
		} else {
			src.state, src.err, src.good = sourceApplied, nil, doc
			logger.V(2).Info("Node settings document read", "configMap", src.ref, "resourceVersion", cm.ResourceVersion, "gives", doc.Settings())
			s.hooks.Valid(src.ref, true)
		}
	}
	if src.good != good {
		if err := save(s.stateDir, s.sources); err != nil {
			logger.Error(err, "Saving the node settings' last good documents; a restart before the API server answers uses older ones")
		}
	}
	v := s.merge()
	changes := nodesettings.Diff(s.effective, v)
	if len(changes) == 0 {
		return
	}
	logger.Info("Node settings changed", "configMap", src.ref, "changes", changes)
	s.effective = v
	s.hooks.Apply(ctx, v.Clone())
}

// keeps says what applies in place of a source's document that cannot be
// used.
func (src *configMapSource) keeps() string {
	if src.good != nil {
		return "its last good document applies"
	}
	return "it gives nothing (no earlier document of it could be used)"
}

// Problems lists, for /readyz, the sources whose document cannot be used
// and those not read yet (the API server has not answered, or meshlet may
// not read the ConfigMap: RBAC).
func (s *Settings) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, src := range s.sources {
		switch src.state {
		case sourceInvalid:
			out = append(out, fmt.Sprintf("node settings: %v (%s)", src.err, src.keeps()))
		case sourcePending:
			out = append(out, fmt.Sprintf("node settings: ConfigMap %s not read yet (%s)", src.ref, src.pendingKeeps()))
		}
	}
	return out
}

func (src *configMapSource) pendingKeeps() string {
	if src.good != nil {
		return "its document saved in --state-dir applies"
	}
	return "it gives nothing until it is read"
}

// Report is /debug/settings: the effective settings, the flags' and each
// ConfigMap's part.
type Report struct {
	Effective nodesettings.Values `json:"effective"`
	Flags     nodesettings.Values `json:"flags"`
	Sources   []SourceReport      `json:"configMaps"`
}

// SourceReport is where one --config-map stands.
type SourceReport struct {
	ConfigMap       string `json:"configMap"`
	State           string `json:"state"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Error           string `json:"error,omitempty"`
	// Gives are the settings its last good document sets.
	Gives []string `json:"gives"`
}

// Report says where the settings and each source stand.
func (s *Settings) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Report{Effective: s.effective.Clone(), Flags: s.flags.Clone(), Sources: []SourceReport{}}
	for _, src := range s.sources {
		d := SourceReport{ConfigMap: src.ref.String(), State: src.state, ResourceVersion: src.resourceVersion, Gives: []string{}}
		if src.err != nil {
			d.Error = src.err.Error()
		}
		if src.good != nil {
			d.Gives = src.good.Settings()
		}
		out.Sources = append(out.Sources, d)
	}
	return out
}
