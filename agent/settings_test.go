package agent

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

func newSettingsUnderTest(t *testing.T, stateDir string, refs ...kube.ObjectRef) (*nodeSettings, *settingsProbe) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.StateDir, cfg.NodeName, cfg.ConfigMaps = stateDir, "node-a", refs
	s := newNodeSettings(klog.NewContext(context.Background(), klog.Background()), cfg)
	p := &settingsProbe{valid: map[string]bool{}}
	prev := s.Values()
	s.apply = func(_ context.Context, v nodesettings.Values) {
		p.applied = append(p.applied, v)
		p.changes = append(p.changes, nodesettings.Diff(prev, v))
		prev = v
	}
	s.invalid = func(ref kube.ObjectRef, _ types.UID, err error) {
		p.invalid = append(p.invalid, ref.String()+": "+err.Error())
	}
	s.valid = func(ref kube.ObjectRef, ok bool) { p.valid[ref.String()] = ok }
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
	if v := s.Values(); v.EnrollTimeout != nodesettings.Duration(DefaultConfig().NRI.EnrollTimeout) || !slices.Equal(v.ExcludedNamespaces, []string{"kube-system", "batch"}) {
		t.Fatalf("override deleted: %+v, want the flags' enrollTimeout and the base's namespaces", v)
	}
	d := s.debug()
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
	if v := s.Values(); v.DNSCapture || v.EnrollTimeout != nodesettings.Duration(DefaultConfig().NRI.EnrollTimeout) {
		t.Fatalf("after an invalid document: %+v, want the last good one's", v)
	}
	if len(p.applied) != 1 || len(p.invalid) != 1 || !strings.Contains(p.invalid[0], "enrollTimeout: Invalid value") || p.valid["meshlet/base"] {
		t.Fatalf("applied %d, invalid %q, valid %v", len(p.applied), p.invalid, p.valid)
	}
	if w := s.problems(); len(w) != 1 || !strings.Contains(w[0], "meshlet/base") || !strings.Contains(w[0], "last good") {
		t.Fatalf("problems: %q", w)
	}
	// The saved state holds the last good document, not the invalid one.
	saved, err := loadSettingsState(dir)
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
	if !s2.Values().DNSCapture || !p2.valid["meshlet/base"] || len(s2.problems()) != 0 {
		t.Fatalf("fixed: %+v, valid %v, problems %q", s2.Values(), p2.valid, s2.problems())
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
		if err := os.WriteFile(filepath.Join(dir, settingsStateFile), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if docs, err := loadSettingsState(dir); err == nil {
			t.Errorf("loadSettingsState(%s) = %v, want an error", bad, docs)
		}
		// And meshlet starts from the flags.
		s, _ := newSettingsUnderTest(t, dir, baseRef)
		if !s.Values().DNSCapture {
			t.Errorf("state %s: started from %+v, want the flags'", bad, s.Values())
		}
	}
}

func TestConfigMapFlag(t *testing.T) {
	var refs []kube.ObjectRef
	v := configMapRefs{&refs}
	for _, arg := range []string{"meshlet/base", "meshlet/a,istio-system/b"} {
		if err := v.Set(arg); err != nil {
			t.Fatal(err)
		}
	}
	if v.String() != "meshlet/base,meshlet/a,istio-system/b" {
		t.Fatalf("refs %s", v)
	}
	for _, bad := range []string{"base", "Meshlet/base", "meshlet/Base_1", "/base"} {
		if err := (configMapRefs{&refs}).Set(bad); err == nil {
			t.Errorf("--config-map=%s accepted", bad)
		}
	}
}

// A ConfigMap whose first document cannot be used, with nothing saved,
// gives nothing, and says so; one never read is a problem too.
func TestNodeSettingsInvalidWithoutLastGood(t *testing.T) {
	ctx := context.Background()
	s, p := newSettingsUnderTest(t, t.TempDir(), baseRef, overrideRef)
	if w := s.problems(); len(w) != 2 || !strings.Contains(w[0], "not read yet") {
		t.Fatalf("before any read: problems %q, want both ConfigMaps not read yet", w)
	}
	s.Observe(ctx, 0, is(settingsConfigMap("1", "dnsCapture: maybe\n")))
	s.Observe(ctx, 1, is(nil))
	if w := s.problems(); len(w) != 1 || !strings.Contains(w[0], "gives nothing") || strings.Contains(w[0], "last good") {
		t.Fatalf("problems %q", w)
	}
	if len(p.invalid) != 1 || !strings.Contains(p.invalid[0], "gives nothing") || len(p.applied) != 0 || !s.Values().DNSCapture {
		t.Fatalf("invalid %q, applied %d, values %+v", p.invalid, len(p.applied), s.Values())
	}
}
