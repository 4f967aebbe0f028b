package nriplugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
)

// Standby is meshlet's runtime hook while another node agent (istio-cni)
// serves the node and meshlet waits to take it over. It meshes nothing.
// It closes one window: the other agent, leaving the node, takes its CNI
// plugin out of the runtime's chain before it stops serving ztunnel, and
// meshlet takes the hook only once it has; a mesh pod whose sandbox starts
// in between would run meshed by no one. Standby refuses such a sandbox
// (the kubelet creates it again, and meshlet enrolls it then). Every other
// pod passes: one the other agent meshed is meshlet's to adopt when it
// takes over.
type Standby struct {
	cfg    Config
	checks StandbyChecks
}

// StandbyChecks are what Standby asks about a pod and the node.
type StandbyChecks struct {
	Resolver enroll.PodInfoResolver
	Policy   enroll.Policy
	// OtherAgentChained reports whether the other agent's CNI plugin is
	// in the runtime's chain: while it is, the pods that agent should
	// mesh went through it.
	OtherAgentChained func() (bool, error)
	// MeshedByOtherAgent reports whether the pod's network namespace
	// holds the other agent's rules.
	MeshedByOtherAgent func(netnsPath string) (bool, error)
	// TookOver is closed once meshlet's own hook has the node's pods:
	// from then on every pod passes (meshlet's own hook decides), however
	// long the standby takes to disconnect.
	TookOver <-chan struct{}
}

// StandbyName is Standby's plugin name: a name of its own, so that it
// never stands in for meshlet's plugin in a runtime that requires that
// one.
const StandbyName = "meshlet-standby"

// NewStandby returns the standby hook; cfg's socket, index, timeouts and
// backoff apply, under StandbyName.
func NewStandby(cfg Config, checks StandbyChecks) *Standby {
	cfg.Name = StandbyName
	return &Standby{cfg: cfg, checks: checks}
}

// Run serves the hook until ctx ends, reconnecting as the runtime comes
// and goes.
func (s *Standby) Run(ctx context.Context) error { return reconnect(ctx, s.cfg, s, func() {}) }

// Configure subscribes to sandbox creation only.
func (s *Standby) Configure(ctx context.Context, _, runtime, version string) (api.EventMask, error) {
	klog.FromContext(ctx).Info("Standby hook connected to the runtime: mesh pods no agent meshed are refused until meshlet takes the node over", "runtime", runtime, "version", version)
	return api.MustParseEventMask("RunPodSandbox"), nil
}

// Synchronize does nothing: the running pods are the other agent's until
// meshlet takes over.
func (s *Standby) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

// errMeshedByNoOne refuses a mesh pod's sandbox during the takeover.
var errMeshedByNoOne = errors.New("no agent meshed it: the node's agent is being replaced and meshlet takes it over in a moment (the runtime will retry)")

// RunPodSandbox refuses a mesh pod that no agent meshed while the other
// agent's plugin is out of the chain.
func (s *Standby) RunPodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	pod, _ := podFromSandbox(sb)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.EnrollTimeout)
	defer cancel()
	err := s.check(ctx, &pod)
	if err != nil {
		klog.FromContext(ctx).Info("Refused a mesh pod's sandbox while waiting to take the node over", "pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID, "sandbox", pod.SandboxID, "reason", err)
		return fmt.Errorf("meshlet: pod %s/%s must join the mesh: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func (s *Standby) check(ctx context.Context, pod *enroll.Pod) error {
	select {
	case <-s.checks.TookOver:
		return nil
	default:
	}
	if pod.NetnsPath == "" {
		return nil // host network
	}
	info, err := s.checks.Resolver.Resolve(ctx, pod)
	if err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	if !s.checks.Policy.Decide(pod, info).Enroll {
		return nil
	}
	if chained, err := s.checks.OtherAgentChained(); err != nil || chained {
		return err
	}
	meshed, err := s.checks.MeshedByOtherAgent(pod.NetnsPath)
	switch {
	case err != nil:
		return err
	case !meshed:
		return errMeshedByNoOne
	}
	return nil
}

var _ interface {
	stub.ConfigureInterface
	stub.SynchronizeInterface
	stub.RunPodInterface
} = (*Standby)(nil)
