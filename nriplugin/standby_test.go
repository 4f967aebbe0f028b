package nriplugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
)

// labelPolicy meshes the pods labelled mesh=yes.
type labelPolicy struct{}

func (labelPolicy) Decide(pod *enroll.Pod, _ enroll.PodInfo) enroll.Decision {
	return enroll.Decision{Enroll: pod.Labels["mesh"] == "yes"}
}

// TestStandbyRefusesOnlyPodsMeshedByNoOne: while meshlet waits to take the
// node over, its standby hook passes every pod except a mesh pod that
// started while the other agent's plugin was out of the chain and that
// holds none of its rules; a failing check refuses, naming its cause.
func TestStandbyRefusesOnlyPodsMeshedByNoOne(t *testing.T) {
	var chained, meshed bool
	var chainErr, rulesErr error
	var looked []string
	tookOver := make(chan struct{})
	s := NewStandby(DefaultConfig(), StandbyChecks{Resolver: enroll.StandaloneResolver{}, Policy: labelPolicy{}, TookOver: tookOver,
		OtherAgentChained: func() (bool, error) { return chained, chainErr },
		MeshedByOtherAgent: func(path string) (bool, error) {
			looked = append(looked, path)
			return meshed, rulesErr
		},
	})
	if s.cfg.Name != StandbyName {
		t.Fatalf("standby registers as %q, want %q", s.cfg.Name, StandbyName)
	}
	mesh, plain := sandbox("mesh", "/run/netns/mesh", "10.0.0.1"), sandbox("plain", "/run/netns/plain", "10.0.0.2")
	mesh.Labels = map[string]string{"mesh": "yes"}
	hostNet := sandbox("host", "", "10.0.0.3")
	hostNet.Labels = map[string]string{"mesh": "yes"}
	ctx := context.Background()
	for _, tc := range []struct {
		name            string
		chained, meshed bool
		chainErr        error
		rulesErr        error
		refused         string // "" passes
	}{
		{name: "other agent's plugin chained", chained: true},
		{name: "meshed by the other agent", meshed: true},
		{name: "meshed by no one", refused: "no agent meshed it"},
		{name: "chain unreadable", chainErr: errors.New("read conflist"), refused: "read conflist"},
		{name: "rules unreadable", rulesErr: errors.New("nftables"), refused: "nftables"},
	} {
		chained, meshed, chainErr, rulesErr, looked = tc.chained, tc.meshed, tc.chainErr, tc.rulesErr, nil
		err := s.RunPodSandbox(ctx, mesh)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: mesh pod refused: %v", tc.name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "ns/pod-mesh")):
			t.Errorf("%s: mesh pod: %v, want a refusal naming the pod and %q", tc.name, err, tc.refused)
		}
		if err := s.RunPodSandbox(ctx, plain); err != nil {
			t.Errorf("%s: a pod outside the mesh refused: %v", tc.name, err)
		}
		if err := s.RunPodSandbox(ctx, hostNet); err != nil {
			t.Errorf("%s: a host-network pod refused: %v", tc.name, err)
		}
		for _, path := range looked {
			if path != "/run/netns/mesh" {
				t.Errorf("%s: looked for the other agent's rules in %s, a pod outside the mesh", tc.name, path)
			}
		}
	}
	// Once meshlet's own hook has the pods, every pod passes.
	chained, meshed = false, false
	close(tookOver)
	if err := s.RunPodSandbox(ctx, mesh); err != nil {
		t.Errorf("a mesh pod refused after meshlet took the node over: %v", err)
	}
	if updates, err := s.Synchronize(ctx, nil, nil); updates != nil || err != nil {
		t.Errorf("Synchronize = %v, %v; want nothing", updates, err)
	}
}
