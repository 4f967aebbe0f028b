// Package policy decides which pods join the mesh, and reads the per-pod
// settings of their annotations, exactly as Istio's ambient node agent
// does, so users see the same behaviour whichever agent runs on the node.
package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/nodesettings"
)

// Istio's keys and values. Defaults for Config.
const (
	DataplaneModeLabel      = "istio.io/dataplane-mode"
	DataplaneModeAmbient    = "ambient"
	DataplaneModeNone       = "none"
	SidecarStatusAnnotation = "sidecar.istio.io/status"
	BypassInboundAnnotation = "ambient.istio.io/bypass-inbound-capture"
	DNSCaptureAnnotation    = "ambient.istio.io/dns-capture"
	ZtunnelNamespace        = "istio-system"
	ZtunnelAppLabel         = "app"
	ZtunnelAppValue         = "ztunnel"
)

// Reasons, as they appear in logs, status and metric labels.
const (
	ReasonPodLabel        = "pod-label"
	ReasonNamespaceLabel  = "namespace-label"
	ReasonNotSelected     = "not-selected"
	ReasonPodOptOut       = "pod-opt-out"
	ReasonHostNetwork     = "host-network"
	ReasonExcludedNS      = "excluded-namespace"
	ReasonZtunnel         = "ztunnel-pod"
	ReasonRuntimeHandler  = "runtime-handler-denied"
	ReasonSidecarInjected = "sidecar-injected"
	ReasonClaim           = "resource-claim"
	ReasonSelector        = "enablement-selector"
)

// Config holds the selection settings. The zero value is not useful: start
// from Defaults.
type Config struct {
	DataplaneModeLabel      string
	SidecarStatusAnnotation string
	BypassInboundAnnotation string
	DNSCaptureAnnotation    string
	// ExcludedNamespaces are never enrolled, whatever their labels.
	ExcludedNamespaces []string
	// DeniedRuntimeHandlers are RuntimeClass handlers (runsc, kata…) whose
	// pods' network namespaces the rules cannot take effect in.
	DeniedRuntimeHandlers []string
	// ZtunnelNamespace and ZtunnelLabels identify ztunnel's own pods.
	ZtunnelNamespace string
	ZtunnelLabels    map[string]string
	// EnablementSelectors, when not nil, select the mesh's pods in place of
	// the dataplane-mode label rules (Istio's ambient enablement
	// selectors): a pod that matches one is enrolled, any other is not
	// (an empty list selects none). Pods that can never be enrolled (see
	// Decide) stay out either way.
	EnablementSelectors []nodesettings.Selector
	// Revision, when not empty, limits the mesh to the pods that select
	// this Istio revision, by RevisionLabel or a tag of it (see
	// PodRevision and revisionGate), so that each revision's meshlet
	// takes its own pods on a node that runs two.
	Revision string
	// RevisionlessPods, with Revision, says whose the pods that select
	// no revision are (empty: RevisionlessDefaultTag).
	RevisionlessPods RevisionlessPods
}

// Defaults returns Istio's defaults.
func Defaults() Config {
	return Config{
		DataplaneModeLabel:      DataplaneModeLabel,
		SidecarStatusAnnotation: SidecarStatusAnnotation,
		BypassInboundAnnotation: BypassInboundAnnotation,
		DNSCaptureAnnotation:    DNSCaptureAnnotation,
		ExcludedNamespaces:      []string{"kube-system"},
		ZtunnelNamespace:        ZtunnelNamespace,
		ZtunnelLabels:           map[string]string{ZtunnelAppLabel: ZtunnelAppValue},
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	for name, v := range map[string]string{
		"dataplane-mode label": c.DataplaneModeLabel, "sidecar status annotation": c.SidecarStatusAnnotation,
		"bypass-inbound annotation": c.BypassInboundAnnotation, "dns-capture annotation": c.DNSCaptureAnnotation,
	} {
		if v == "" {
			return fmt.Errorf("policy: %s key must not be empty", name)
		}
	}
	if len(c.ZtunnelLabels) == 0 {
		return fmt.Errorf("policy: ztunnel labels must not be empty (ztunnel's own pods must never be enrolled)")
	}
	return c.validateRevision()
}

// Policy implements enroll.Policy, and enroll.SettingsSource for the
// settings pods give in their annotations. Its configuration can change
// while it decides (Update): each decision reads one configuration.
type Policy struct {
	cfg  atomic.Pointer[Config]
	tags atomic.Pointer[RevisionTags]
}

var (
	_ enroll.Policy         = (*Policy)(nil)
	_ enroll.SettingsSource = (*Policy)(nil)
)

// New returns a policy for cfg.
func New(cfg Config) (*Policy, error) {
	p := &Policy{}
	if err := p.Update(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Update makes cfg the policy's configuration, for the decisions that
// start from now on; an invalid cfg changes nothing.
func (p *Policy) Update(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	p.cfg.Store(&cfg)
	return nil
}

// Config returns the policy's current configuration.
func (p *Policy) Config() Config { return *p.cfg.Load() }

// Decide applies, in order: host network, excluded namespace, ztunnel
// itself, denied runtime handler, sidecar-injected; then the enablement
// selectors when there are any (Config.EnablementSelectors), else the
// pod's `none` opt-out, then the pod label or the namespace label. The
// first rule that matches gives the reason. With a revision
// (Config.Revision), a pod those rules select is enrolled only if it is
// the revision's (revisionGate).
//
// The pod's labels and annotations are the API server's current ones when
// known (info), else the sandbox's.
func (p *Policy) Decide(pod *enroll.Pod, info enroll.PodInfo) enroll.Decision {
	c := p.cfg.Load()
	return c.revisionGate(p.RevisionTags(), pod, info, c.selects(pod, info))
}

// selects applies Decide's rules but the revision's.
func (c *Config) selects(pod *enroll.Pod, info enroll.PodInfo) enroll.Decision {
	labels, _ := info.Metadata(pod)
	if reason := ineligible(c, pod, info); reason != "" {
		return skip(reason)
	}
	if c.EnablementSelectors != nil {
		for _, s := range c.EnablementSelectors {
			if s.Matches(labels, info.NamespaceLabels) {
				return enroll.Decision{Enroll: true, Reason: ReasonSelector}
			}
		}
		return skip(ReasonNotSelected)
	}
	switch podMode := labels[c.DataplaneModeLabel]; {
	case podMode == DataplaneModeNone:
		return skip(ReasonPodOptOut)
	case podMode == DataplaneModeAmbient:
		return enroll.Decision{Enroll: true, Reason: ReasonPodLabel}
	case info.NamespaceLabels[c.DataplaneModeLabel] == DataplaneModeAmbient:
		return enroll.Decision{Enroll: true, Reason: ReasonNamespaceLabel}
	default:
		return skip(ReasonNotSelected)
	}
}

// DecideClaimed decides for a pod that holds a mesh ResourceClaim: the
// claim selects it whatever its labels say, so only what makes in-pod
// redirection impossible or wrong (host network, an excluded namespace,
// ztunnel itself, a denied runtime handler, a sidecar) keeps it out.
// ClaimConflict refuses those pods, and a `none` label, before they start.
func (p *Policy) DecideClaimed(pod *enroll.Pod, info enroll.PodInfo) enroll.Decision {
	if reason := ineligible(p.cfg.Load(), pod, info); reason != "" {
		return skip(reason)
	}
	return enroll.Decision{Enroll: true, Reason: ReasonClaim}
}

// ClaimConflict says why a pod must not get a mesh claim: it could never
// be meshed (see DecideClaimed) or its own label opts it out. nil means
// the claim can be prepared.
func (p *Policy) ClaimConflict(pod *enroll.Pod, info enroll.PodInfo) error {
	c := p.cfg.Load()
	labels, _ := info.Metadata(pod)
	switch reason := ineligible(c, pod, info); reason {
	case "":
	case ReasonHostNetwork:
		return errors.New("the pod uses the host network: it has no network namespace of its own to redirect")
	case ReasonExcludedNS:
		return fmt.Errorf("namespace %q is excluded from the mesh on this node (--excluded-namespaces, or the node settings)", pod.Namespace)
	case ReasonZtunnel:
		return errors.New("the pod is ztunnel itself")
	case ReasonRuntimeHandler:
		return fmt.Errorf("runtime handler %q is denied on this node (--denied-runtime-handlers, or the node settings): in-pod rules cannot take effect in its sandboxes", pod.RuntimeHandler)
	case ReasonSidecarInjected:
		return fmt.Errorf("the pod has a sidecar (annotation %s)", c.SidecarStatusAnnotation)
	default:
		return fmt.Errorf("the pod cannot be meshed (%s)", reason)
	}
	if labels[c.DataplaneModeLabel] == DataplaneModeNone {
		return fmt.Errorf("the pod opts out of the mesh with label %s=%s", c.DataplaneModeLabel, DataplaneModeNone)
	}
	return nil
}

// ineligible is the reason a pod can never be enrolled, whatever selects
// it; "" when it can be.
func ineligible(c *Config, pod *enroll.Pod, info enroll.PodInfo) string {
	labels, annotations := info.Metadata(pod)
	switch {
	case pod.HostNetwork:
		return ReasonHostNetwork
	case slices.Contains(c.ExcludedNamespaces, pod.Namespace):
		return ReasonExcludedNS
	case isZtunnel(c, pod.Namespace, labels):
		return ReasonZtunnel
	case pod.RuntimeHandler != "" && slices.Contains(c.DeniedRuntimeHandlers, pod.RuntimeHandler):
		return ReasonRuntimeHandler
	case hasKey(annotations, c.SidecarStatusAnnotation):
		return ReasonSidecarInjected
	}
	return ""
}

// PodSettings reads the pod's settings annotations (the API server's
// current ones where known): DNS capture and inbound bypass, as booleans
// the way Istio parses them (strconv.ParseBool). An absent annotation
// leaves the setting to the node's default; an unparsable one too, with a
// warning naming it.
func (p *Policy) PodSettings(pod *enroll.Pod, info enroll.PodInfo) (enroll.SettingsOverride, []string) {
	c := p.cfg.Load()
	_, annotations := info.Metadata(pod)
	var o enroll.SettingsOverride
	var warnings []string
	o.DNSCapture = boolAnnotation(annotations, c.DNSCaptureAnnotation, &warnings)
	o.BypassInbound = boolAnnotation(annotations, c.BypassInboundAnnotation, &warnings)
	return o, warnings
}

// boolAnnotation reads a boolean pod annotation; nil when it is absent or
// unparsable (then with a warning).
func boolAnnotation(annotations map[string]string, key string, warnings *[]string) *bool {
	v, ok := annotations[key]
	if !ok {
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		*warnings = append(*warnings, fmt.Sprintf("annotation %s=%q is not a boolean; ignored (the setting is left to other sources and the node's default)", key, v))
		return nil
	}
	return &b
}

func isZtunnel(c *Config, namespace string, labels map[string]string) bool {
	if namespace != c.ZtunnelNamespace {
		return false
	}
	for k, v := range c.ZtunnelLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func skip(reason string) enroll.Decision { return enroll.Decision{Reason: reason} }

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}
