package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criTimeout bounds one CRI call, as Crictl bounds one crictl run.
const criTimeout = 60 * time.Second

// cri runs call against the environment's runtime over a connection of
// its own, as crictl does. A connection per call, not one kept open: a
// kept one would still be backing off from a runtime restart when the
// next call comes, and fail a call the restarted runtime would serve.
// The pods' hot path (run, start, inspect, remove) goes through here, not
// through crictl, whose process start costs more than the call itself.
func (e *Env) cri(what string, call func(context.Context, runtimeapi.RuntimeServiceClient) error) error {
	return e.criWithin(criTimeout, what, call)
}

// criWithin is cri with its own bound on the call.
func (e *Env) criWithin(timeout time.Duration, what string, call func(context.Context, runtimeapi.RuntimeServiceClient) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///cri",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.CRISocket)
		}),
		grpc.WithAuthority("localhost"),
	)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer conn.Close()
	if err := call(ctx, runtimeapi.NewRuntimeServiceClient(conn)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// PodSpec describes a pod sandbox to run through CRI.
type PodSpec struct {
	Name, Namespace, UID string
	// Attempt numbers the pod's sandboxes, as the kubelet does when it
	// re-creates one (same UID, attempt+1).
	Attempt     uint32
	Labels      map[string]string
	Annotations map[string]string
	HostNetwork bool
}

// sandboxConfig is the sandbox a PodSpec describes; the runtime is given
// it again with each of the pod's containers, as the kubelet does.
func (e *Env) sandboxConfig(p PodSpec) *runtimeapi.PodSandboxConfig {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: p.Namespace, Uid: p.UID, Attempt: p.Attempt},
		Labels:       p.Labels,
		Annotations:  p.Annotations,
		LogDirectory: e.path("logs", "pods", p.UID),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	if p.HostNetwork {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}
	}
	return cfg
}

// RunPod creates a pod sandbox (as crictl runp) and returns its ID.
func (e *Env) RunPod(p PodSpec) (string, error) {
	var id string
	err := e.cri("run pod "+p.Name, func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
		r, err := c.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.sandboxConfig(p)})
		if err == nil && r.GetPodSandboxId() == "" {
			err = errors.New("the runtime returned no sandbox ID")
		}
		id = r.GetPodSandboxId()
		return err
	})
	return id, err
}

// StartContainer creates and starts an app container in a pod; it fails if
// the runtime (or an NRI plugin) refuses it.
func (e *Env) StartContainer(podID string, p PodSpec, name string) (string, error) {
	return e.StartContainerWithCDI(podID, p, name)
}

// StartContainerWithCDI is StartContainer for a container given the CDI
// devices (fully qualified names), as the kubelet passes a claim's.
func (e *Env) StartContainerWithCDI(podID string, p PodSpec, name string, cdi ...string) (string, error) {
	config := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		// The name as the pod spec gives it, as the kubelet passes it:
		// CRI-O refuses a container without it.
		Image:   &runtimeapi.ImageSpec{Image: Image, UserSpecifiedImage: Image},
		Command: []string{"/pause"},
		LogPath: name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	for _, d := range cdi {
		config.CDIDevices = append(config.CDIDevices, &runtimeapi.CDIDevice{Name: d})
	}
	var id string
	if err := e.cri("create container "+name+" in pod "+p.Name, func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
		r, err := c.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: config, SandboxConfig: e.sandboxConfig(p)})
		if err == nil && r.GetContainerId() == "" {
			err = errors.New("the runtime returned no container ID")
		}
		id = r.GetContainerId()
		return err
	}); err != nil {
		return "", err
	}
	return id, e.cri("start container "+name+" in pod "+p.Name, func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
		_, err := c.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		return err
	})
}

// ContainerStarted is when the runtime started container id; the zero time
// if it never did (created, then refused or removed before its start).
func (e *Env) ContainerStarted(id string) (time.Time, error) {
	var at time.Time
	err := e.cri("status of container "+id, func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
		r, err := c.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return err
		}
		if ns := r.GetStatus().GetStartedAt(); ns > 0 {
			at = time.Unix(0, ns)
		}
		return nil
	})
	return at, err
}

// PodInfo is what the runtime reports about a sandbox.
type PodInfo struct {
	NetnsPath string
	IP        string
	// Pid is the sandbox's pause process (0 once stopped): its
	// /proc/<pid>/ns/net is the pod's netns, whatever path the runtime
	// reports.
	Pid   int
	State string // SANDBOX_READY or SANDBOX_NOTREADY
}

// InspectPod returns the sandbox's netns path, IP, pause pid and state.
func (e *Env) InspectPod(id string) (PodInfo, error) {
	var info PodInfo
	err := e.cri("inspect pod "+id, func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
		r, err := c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
		if err != nil {
			return err
		}
		info = PodInfo{IP: r.GetStatus().GetNetwork().GetIp(), State: r.GetStatus().GetState().String()}
		// The runtime's own account of the sandbox (containerd's
		// "info"): its pause pid and OCI spec.
		var v struct {
			Pid         int `json:"pid"`
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct{ Type, Path string } `json:"namespaces"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		}
		if raw, ok := r.GetInfo()["info"]; ok {
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				return fmt.Errorf("parse the runtime's info: %w", err)
			}
		}
		info.Pid = v.Pid
		for _, ns := range v.RuntimeSpec.Linux.Namespaces {
			if ns.Type == "network" {
				info.NetnsPath = ns.Path
			}
		}
		return nil
	})
	return info, err
}

// StopPod stops a sandbox (as crictl stopp).
func (e *Env) StopPod(id string) error {
	return e.cri("stop pod "+id, func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
		_, err := c.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	})
}

// RemovePod stops and removes a sandbox (as crictl rmp --force).
func (e *Env) RemovePod(id string) error {
	return e.cri("remove pod "+id, func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
		if _, err := c.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			return err
		}
		_, err := c.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	})
}

// RemovePods removes sandboxes side by side, as the kubelet tears down
// pods, and as crictl rmp does with several.
func (e *Env) RemovePods(ids ...string) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = e.RemovePod(id) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RemoveAllPods removes every sandbox the runtime has (as crictl rmp --all
// --force).
func (e *Env) RemoveAllPods() error {
	var ids []string
	if err := e.cri("list pods", func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
		r, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		for _, sb := range r.GetItems() {
			ids = append(ids, sb.GetId())
		}
		return err
	}); err != nil {
		return err
	}
	return e.RemovePods(ids...)
}
