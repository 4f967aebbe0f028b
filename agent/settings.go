package agent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/nodesettings"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/draplugin"
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

// nodeSettings are the node's effective settings: the flags' values with
// the document of each --config-map merged over them, in order (a later
// one wins). A ConfigMap that changes is applied at once; one whose
// document cannot be used keeps the last good one, which --state-dir keeps
// across restarts; a deleted one no longer gives anything.
type nodeSettings struct {
	flags    nodesettings.Values
	stateDir string

	// apply puts new settings into effect.
	apply func(ctx context.Context, v nodesettings.Values)
	// invalid reports a document that cannot be used (an event on the
	// ConfigMap); valid (the metric) is told where each source stands.
	invalid func(ref kube.ObjectRef, uid types.UID, err error)
	valid   func(ref kube.ObjectRef, ok bool)

	mu        sync.Mutex
	sources   []*configMapSource
	effective nodesettings.Values
}

// flagValues are the node settings meshlet's flags give.
func flagValues(cfg Config) nodesettings.Values {
	return nodesettings.Values{
		ExcludedNamespaces:    slices.Clone(cfg.Policy.ExcludedNamespaces),
		DeniedRuntimeHandlers: slices.Clone(cfg.Policy.DeniedRuntimeHandlers),
		DNSCapture:            cfg.PodDefaults.DNSCapture,
		IPv6:                  cfg.Redirect.IPv6,
		DataplaneModeLabel:    cfg.Policy.DataplaneModeLabel,
		LogVerbosity:          cfg.LogVerbosity,
		EnrollTimeout:         nodesettings.Duration(cfg.NRI.EnrollTimeout),
	}
}

// newNodeSettings starts from the flags and the last good documents
// --state-dir holds for the ConfigMaps cfg names (a saved document of a
// ConfigMap no longer named is dropped at the next save).
func newNodeSettings(ctx context.Context, cfg Config) *nodeSettings {
	logger := klog.FromContext(ctx)
	s := &nodeSettings{flags: flagValues(cfg), stateDir: cfg.StateDir,
		apply:   func(context.Context, nodesettings.Values) {},
		invalid: func(kube.ObjectRef, types.UID, error) {}, valid: func(kube.ObjectRef, bool) {}}
	saved, err := loadSettingsState(cfg.StateDir)
	if err != nil {
		logger.Error(err, "Ignoring the saved node settings: until the API server answers, the flags' settings apply")
	}
	for _, ref := range cfg.ConfigMaps {
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
		logger.Info("Node settings until the ConfigMaps are read", "configMaps", cfg.ConfigMaps, "savedDocuments", fromSaved, "settings", s.effective)
	}
	return s
}

// Values returns the effective settings.
func (s *nodeSettings) Values() nodesettings.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effective.Clone()
}

func (s *nodeSettings) merge() nodesettings.Values {
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
func (s *nodeSettings) Observe(ctx context.Context, i int, read func() *kube.ConfigMap) {
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
		s.valid(src.ref, true)
	case cm.ResourceVersion == src.resourceVersion && src.state != sourcePending:
		return // a resync: nothing new
	default:
		src.resourceVersion = cm.ResourceVersion
		doc, err := nodesettings.Decode(cm.Data, cm.Keys)
		if err != nil {
			err = fmt.Errorf("ConfigMap %s (resourceVersion %s): %w", src.ref, cm.ResourceVersion, err)
			src.state, src.err = sourceInvalid, err
			logger.Error(err, "Node settings document cannot be used; "+src.keeps(), "configMap", src.ref)
			s.invalid(src.ref, cm.UID, fmt.Errorf("%w; %s", err, src.keeps()))
			s.valid(src.ref, false)
		} else {
			src.state, src.err, src.good = sourceApplied, nil, doc
			logger.V(2).Info("Node settings document read", "configMap", src.ref, "resourceVersion", cm.ResourceVersion, "gives", doc.Settings())
			s.valid(src.ref, true)
		}
	}
	if src.good != good {
		if err := saveSettingsState(s.stateDir, s.sources); err != nil {
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
	s.apply(ctx, v.Clone())
}

// keeps says what applies in place of a source's document that cannot be
// used.
func (src *configMapSource) keeps() string {
	if src.good != nil {
		return "its last good document applies"
	}
	return "it gives nothing (no earlier document of it could be used)"
}

// problems lists, for /readyz, the sources whose document cannot be used
// and those not read yet (the API server has not answered, or meshlet may
// not read the ConfigMap: RBAC).
func (s *nodeSettings) problems() []string {
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

// debugSettings is /debug/settings: the effective settings, the flags'
// and each ConfigMap's part.
type debugSettings struct {
	Effective nodesettings.Values `json:"effective"`
	Flags     nodesettings.Values `json:"flags"`
	Sources   []debugSource       `json:"configMaps"`
}

type debugSource struct {
	ConfigMap       string `json:"configMap"`
	State           string `json:"state"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Error           string `json:"error,omitempty"`
	// Gives are the settings its last good document sets.
	Gives []string `json:"gives"`
}

func (s *nodeSettings) debug() debugSettings {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := debugSettings{Effective: s.effective.Clone(), Flags: s.flags.Clone(), Sources: []debugSource{}}
	for _, src := range s.sources {
		d := debugSource{ConfigMap: src.ref.String(), State: src.state, ResourceVersion: src.resourceVersion, Gives: []string{}}
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

// configMapRefs is --config-map: repeatable, each NAMESPACE/NAME (or a
// comma-separated list of them, as the environment variable gives them).
type configMapRefs struct{ dst *[]kube.ObjectRef }

func (r configMapRefs) String() string {
	if r.dst == nil {
		return ""
	}
	parts := make([]string, len(*r.dst))
	for i, ref := range *r.dst {
		parts[i] = ref.String()
	}
	return strings.Join(parts, ",")
}

func (r configMapRefs) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ref, err := parseObjectRef(item)
		if err != nil {
			return err
		}
		*r.dst = append(*r.dst, ref)
	}
	return nil
}

// parseObjectRef reads NAMESPACE/NAME.
func parseObjectRef(s string) (kube.ObjectRef, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return kube.ObjectRef{}, fmt.Errorf("%q: want NAMESPACE/NAME", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return kube.ObjectRef{}, fmt.Errorf("%q: namespace %s", s, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return kube.ObjectRef{}, fmt.Errorf("%q: name %s", s, strings.Join(errs, "; "))
	}
	return kube.ObjectRef{Namespace: ns, Name: name}, nil
}

// logVerbosity is -v: klog's verbosity, kept in Config as well so that
// the node settings start from it.
type logVerbosity struct{ dst *int }

func (l logVerbosity) String() string {
	if l.dst == nil {
		return "0"
	}
	return strconv.Itoa(*l.dst)
}

// Set also sets klog's verbosity at once, for what logs before Run (the
// commands, start-up checks); Run sets it again from the node settings.
func (l logVerbosity) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%q: not a number", v)
	}
	if err := nodesettings.CheckLogVerbosity(n); err != nil {
		return err
	}
	if err := setLogVerbosity(n); err != nil {
		return err
	}
	*l.dst = n
	return nil
}

// setLogVerbosity sets klog's verbosity for the whole process (klog's
// Level.Set sets the global level, whatever its receiver).
func setLogVerbosity(n int) error {
	var l klog.Level
	return l.Set(strconv.Itoa(n))
}

// policyConfig is base with the node settings' share of the policy.
func policyConfig(base policy.Config, v nodesettings.Values) (policy.Config, error) {
	sel, err := nodesettings.Compile(v.EnablementSelectors)
	if err != nil {
		return policy.Config{}, err
	}
	base.ExcludedNamespaces = v.ExcludedNamespaces
	base.DeniedRuntimeHandlers = v.DeniedRuntimeHandlers
	base.DataplaneModeLabel = v.DataplaneModeLabel
	base.EnablementSelectors = sel
	return base, nil
}

// ipv6Follower is a component that follows the node's IPv6 setting.
type ipv6Follower interface{ SetIPv6(on bool) }

var (
	_ ipv6Follower = (*redirect.Redirector)(nil)
	_ ipv6Follower = (*draplugin.Driver)(nil)
)

// settingsTargets are what the node settings apply to while meshlet runs.
type settingsTargets struct {
	cfg           Config
	policy        *policy.Policy
	core          *enroll.Core
	enrollTimeout *atomic.Int64
	// ipv6Followers are the redirector and, with DRA, the device's
	// attributes.
	ipv6Followers []ipv6Follower
	// cniExcluded is meshlet-cni's entry's share (CNI mode).
	cniExcluded *cniExclusions
}

// apply puts v into effect for what starts from now on: the policy's
// share, the pods' default settings, IPv6 redirection (and the DRA
// device's ipv6 attribute), the excluded namespaces in meshlet-cni's entry
// (CNI mode), the enroll timeout and the log verbosity.
// Running pods follow when they are converged again (Reevaluate): those
// whose settings or rules change are re-programmed.
func (t settingsTargets) apply(ctx context.Context, v nodesettings.Values) {
	logger := klog.FromContext(ctx)
	// Documents are validated when read: these fail only on a bug.
	if pc, err := policyConfig(t.cfg.Policy, v); err != nil {
		logger.Error(err, "Node settings: the policy keeps its previous settings")
	} else if err := t.policy.Update(pc); err != nil {
		logger.Error(err, "Node settings: the policy keeps its previous settings")
	}
	defaults := t.cfg.PodDefaults
	defaults.DNSCapture = v.DNSCapture
	t.core.SetDefaults(defaults)
	for _, c := range t.ipv6Followers {
		c.SetIPv6(v.IPv6)
	}
	if t.cniExcluded != nil {
		t.cniExcluded.SetExcludedNamespaces(v.ExcludedNamespaces)
	}
	t.enrollTimeout.Store(int64(v.EnrollTimeout))
	if err := setLogVerbosity(v.LogVerbosity); err != nil {
		logger.Error(err, "Node settings: the log verbosity stays as it was")
	}
}
