package live

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/nodesettings"
)

func settingsConfigMap(rv, doc string) *kube.ConfigMap {
	return &kube.ConfigMap{UID: types.UID("uid-" + rv), ResourceVersion: rv,
		Data: map[string]string{nodesettings.DataKey: "apiVersion: meshlet.dev/v1alpha1\nkind: NodeSettings\n" + doc},
		Keys: []string{nodesettings.DataKey}}
}

type settingsProbe struct {
	applied []nodesettings.Values
	changes [][]string
	invalid []string
	valid   map[string]bool
}

// flagValues are meshlet's default flags' settings.
var flagValues = nodesettings.Values{ExcludedNamespaces: []string{"kube-system"}, DNSCapture: true, IPv6: true,
	DataplaneModeLabel: "istio.io/dataplane-mode", EnrollTimeout: nodesettings.Duration(1500 * time.Millisecond)}

func newSettingsUnderTest(t *testing.T, stateDir string, refs ...kube.ObjectRef) (*Settings, *settingsProbe) {
	t.Helper()
	s := New(klog.NewContext(context.Background(), klog.Background()), flagValues.Clone(), stateDir, refs)
	p := &settingsProbe{valid: map[string]bool{}}
	prev := s.Values()
	s.SetHooks(Hooks{
		Apply: func(_ context.Context, v nodesettings.Values) {
			p.applied = append(p.applied, v)
			p.changes = append(p.changes, nodesettings.Diff(prev, v))
			prev = v
		},
		Invalid: func(ref kube.ObjectRef, _ types.UID, err error) {
			p.invalid = append(p.invalid, ref.String()+": "+err.Error())
		},
		Valid: func(ref kube.ObjectRef, ok bool) { p.valid[ref.String()] = ok },
	})
	return s, p
}

// is reads cm, as a ConfigMapWatch's Get would.
func is(cm *kube.ConfigMap) func() *kube.ConfigMap { return func() *kube.ConfigMap { return cm } }

var (
	baseRef     = kube.ObjectRef{Namespace: "meshlet", Name: "base"}
	overrideRef = kube.ObjectRef{Namespace: "meshlet", Name: "override"}
)

func TestNodeSettingsMergeInOrderAndApplyChanges(t *testing.T) {
	ctx := context.Background()
	s, p := newSettingsUnderTest(t, t.TempDir(), baseRef, overrideRef)
	if !s.Values().DNSCapture {
		t.Fatal("before any ConfigMap: want the flags' dnsCapture (true)")
	}
	s.Observe(ctx, 0, is(settingsConfigMap("1", "dnsCapture: false\nexcludedNamespaces: [kube-system, batch]\n")))
	s.Observe(ctx, 1, is(settingsConfigMap("7", "dnsCapture: true\n")))
	v := s.Values()
	if !v.DNSCapture || !slices.Equal(v.ExcludedNamespaces, []string{"kube-system", "batch"}) {
		t.Fatalf("merged: %+v; want the override's dnsCapture and the base's namespaces", v)
	}
	if len(p.applied) != 2 || !slices.Equal(p.changes[0], []string{"excludedNamespaces: [kube-system] -> [kube-system,batch]", "dnsCapture: true -> false"}) ||
		!slices.Equal(p.changes[1], []string{"dnsCapture: false -> true"}) {
		t.Fatalf("applied %d times, changes %q", len(p.applied), p.changes)
	}
	// A resync (same resourceVersion) and an edit that changes nothing
	// effective apply nothing.
	s.Observe(ctx, 1, is(settingsConfigMap("7", "dnsCapture: true\n")))
	s.Observe(ctx, 0, is(settingsConfigMap("2", "dnsCapture: true\nexcludedNamespaces: [kube-system, batch]\n")))
	if len(p.applied) != 2 {
		t.Fatalf("applied again without a change: %q", p.changes)
	}
	// The override alone lowers the enroll timeout; deleted, the flags'
	// applies again, and the base's settings stay.
	s.Observe(ctx, 1, is(settingsConfigMap("8", "dnsCapture: true\nenrollTimeout: 700ms\n")))
	if v := s.Values(); v.EnrollTimeout != nodesettings.Duration(700*time.Millisecond) {
		t.Fatalf("override's enrollTimeout not applied: %+v", v)
	}
	s.Observe(ctx, 1, is(nil))
	if v := s.Values(); v.EnrollTimeout != flagValues.EnrollTimeout || !slices.Equal(v.ExcludedNamespaces, []string{"kube-system", "batch"}) {
		t.Fatalf("override deleted: %+v, want the flags' enrollTimeout and the base's namespaces", v)
	}
	d := s.Report()
	if d.Sources[0].State != sourceApplied || d.Sources[1].State != sourceAbsent || !slices.Equal(d.Sources[0].Gives, []string{"dnsCapture", "excludedNamespaces"}) {
		t.Fatalf("debug: %+v", d.Sources)
	}
}

func TestNodeSettingsKeepTheLastGoodDocument(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, p := newSettingsUnderTest(t, dir, baseRef)
	s.Observe(ctx, 0, is(settingsConfigMap("1", "dnsCapture: false\n")))
	s.Observe(ctx, 0, is(settingsConfigMap("2", "dnsCapture: false\nenrollTimeout: 5s\n")))
	if v := s.Values(); v.DNSCapture || v.EnrollTimeout != flagValues.EnrollTimeout {
		t.Fatalf("after an invalid document: %+v, want the last good one's", v)
	}
	if len(p.applied) != 1 || len(p.invalid) != 1 || !strings.Contains(p.invalid[0], "enrollTimeout: Invalid value") || p.valid["meshlet/base"] {
		t.Fatalf("applied %d, invalid %q, valid %v", len(p.applied), p.invalid, p.valid)
	}
	if w := s.Problems(); len(w) != 1 || !strings.Contains(w[0], "meshlet/base") || !strings.Contains(w[0], "last good") {
		t.Fatalf("problems: %q", w)
	}
	// The saved state holds the last good document, not the invalid one.
	saved, err := Load(dir)
	if err != nil || saved["meshlet/base"] == nil || saved["meshlet/base"].EnrollTimeout != nil {
		t.Fatalf("saved %+v, %v; want the last good document", saved, err)
	}

	// A restarted meshlet starts from the last good document, before it
	// reads the ConfigMap, and keeps it while the document is invalid.
	s2, p2 := newSettingsUnderTest(t, dir, baseRef)
	if s2.Values().DNSCapture {
		t.Fatal("restarted: want the saved document's dnsCapture (false) before the ConfigMap is read")
	}
	s2.Observe(ctx, 0, is(settingsConfigMap("2", "dnsCapture: false\nenrollTimeout: 5s\n")))
	if s2.Values().DNSCapture || len(p2.invalid) != 1 {
		t.Fatalf("restarted, invalid document: %+v, invalid %q", s2.Values(), p2.invalid)
	}
	// Fixed: valid again, problem gone.
	s2.Observe(ctx, 0, is(settingsConfigMap("3", "dnsCapture: true\n")))
	if !s2.Values().DNSCapture || !p2.valid["meshlet/base"] || len(s2.Problems()) != 0 {
		t.Fatalf("fixed: %+v, valid %v, problems %q", s2.Values(), p2.valid, s2.Problems())
	}
}

func TestNodeSettingsStateFileRefused(t *testing.T) {
	dir := t.TempDir()
	const doc = `{"apiVersion": "meshlet.dev/v1alpha1", "kind": "NodeSettings", "dnsCapture": false}`
	for _, bad := range []string{
		`{"version": 2, "documents": {"meshlet/base": ` + doc + `}}`,
		`{"version": 1, "documents": {"meshlet/base": {"apiVersion": "meshlet.dev/v1alpha1", "kind": "NodeSettings", "dnsCapture": false, "logVerbosity": 99}}}`,
		`{"version": 1, "version": 1, "documents": {"meshlet/base": ` + doc + `}}`,
		`{"version": 1, "documents": {"meshlet/base": ` + doc + `, "meshlet/other": null}}`,
		`{"version": 1, "documents": {"meshlet/base": ` + doc + `}} trailing`,
	} {
		if err := os.WriteFile(filepath.Join(dir, FileName), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if docs, err := Load(dir); err == nil {
			t.Errorf("Load(%s) = %v, want an error", bad, docs)
		}
		// And meshlet starts from the flags.
		s, _ := newSettingsUnderTest(t, dir, baseRef)
		if !s.Values().DNSCapture {
			t.Errorf("state %s: started from %+v, want the flags'", bad, s.Values())
		}
	}
}

// A ConfigMap whose first document cannot be used, with nothing saved,
// gives nothing, and says so; one never read is a problem too.
func TestNodeSettingsInvalidWithoutLastGood(t *testing.T) {
	ctx := context.Background()
	s, p := newSettingsUnderTest(t, t.TempDir(), baseRef, overrideRef)
	if w := s.Problems(); len(w) != 2 || !strings.Contains(w[0], "not read yet") {
		t.Fatalf("before any read: problems %q, want both ConfigMaps not read yet", w)
	}
	s.Observe(ctx, 0, is(settingsConfigMap("1", "dnsCapture: maybe\n")))
	s.Observe(ctx, 1, is(nil))
	if w := s.Problems(); len(w) != 1 || !strings.Contains(w[0], "gives nothing") || strings.Contains(w[0], "last good") {
		t.Fatalf("problems %q", w)
	}
	if len(p.invalid) != 1 || !strings.Contains(p.invalid[0], "gives nothing") || len(p.applied) != 0 || !s.Values().DNSCapture {
		t.Fatalf("invalid %q, applied %d, values %+v", p.invalid, len(p.applied), s.Values())
	}
}
