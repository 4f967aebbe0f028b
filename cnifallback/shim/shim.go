package shim

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/meshlet/meshlet/cnifallback/wire"
)

// Funcs are the plugin's CNI commands, for skel.PluginMainFuncs.
func Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{
		Add:    func(args *skel.CmdArgs) error { return Add(args, os.Stdout) },
		Del:    Del,
		Check:  Check,
		Status: Status,
		GC:     GC,
	}
}

// k8sArgs are the pod's identity in CNI_ARGS, as kubelet-driven runtimes
// pass it.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // the runtime's names
	K8S_POD_NAME      types.UnmarshallableString //nolint:revive
	K8S_POD_UID       types.UnmarshallableString //nolint:revive
}

func podOf(args *skel.CmdArgs) (wire.Pod, error) {
	var k k8sArgs
	if err := types.LoadArgs(args.Args, &k); err != nil {
		return wire.Pod{}, fmt.Errorf("meshlet-cni: CNI_ARGS: %w", err)
	}
	return wire.Pod{Namespace: string(k.K8S_POD_NAMESPACE), Name: string(k.K8S_POD_NAME), UID: string(k.K8S_POD_UID)}, nil
}

// Add asks the agent to enroll the pod and passes the previous result
// through unchanged. A pod that must be meshed and is not fails the ADD,
// so the runtime retries; with the agent unreachable, every pod fails
// unless its namespace is excluded in the plugin's configuration.
func Add(args *skel.CmdArgs, out io.Writer) error {
	conf, req, err := request(args, wire.CommandAdd)
	if err != nil {
		return err
	}
	if req != nil {
		if err := conf.forward(req); err != nil {
			return err
		}
	}
	return printTo(out, conf)
}

// Check asks the agent whether the pod is as it should be.
func Check(args *skel.CmdArgs) error {
	conf, req, err := request(args, wire.CommandCheck)
	if err != nil || req == nil {
		return err
	}
	return conf.forward(req)
}

// request reads what the runtime passed (the configuration, the previous
// plugin's result, the pod) into the request of cmd; nil for a sandbox
// that is not a Kubernetes pod (no K8S_POD_* arguments): not meshlet's.
func request(args *skel.CmdArgs, cmd wire.Command) (*Config, *wire.Request, error) {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return nil, nil, err
	}
	prev, err := podNetworkResult(conf)
	if err != nil {
		return nil, nil, err
	}
	pod, err := podOf(args)
	if err != nil || pod.UID == "" {
		return conf, nil, err
	}
	return conf, &wire.Request{Version: wire.Version, Command: cmd, ContainerID: args.ContainerID,
		Netns: args.Netns, IfName: args.IfName, Pod: pod, IPs: addresses(prev)}, nil
}

// Del tells the agent the pod's network goes. It never fails: DEL must
// succeed for whatever is already gone, and the agent also learns of
// removed pods from the runtime.
func Del(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return nil // nothing of ours can be undone without a configuration
	}
	pod, _ := podOf(args)
	req := &wire.Request{Version: wire.Version, Command: wire.CommandDel, ContainerID: args.ContainerID,
		Netns: args.Netns, IfName: args.IfName, Pod: pod}
	_, _ = wire.Call(conf.AgentSocket, req, conf.timeout)
	return nil
}

// Status reports the plugin ready. It does not ask the agent: a failing
// STATUS makes the runtime stop every pod's networking on the node,
// pods outside the mesh included, where a failing ADD stops only the
// pods the mesh must hold.
func Status(*skel.CmdArgs) error { return nil }

// GC has nothing to collect: the plugin keeps no state, and the agent
// reconciles with the runtime.
func GC(*skel.CmdArgs) error { return nil }

// forward calls the agent and turns its answer into the command's result.
func (conf *Config) forward(req *wire.Request) error {
	resp, err := wire.Call(conf.AgentSocket, req, conf.timeout)
	if err != nil {
		if slices.Contains(conf.ExcludeNamespaces, req.Pod.Namespace) {
			return nil // the mesh's own infrastructure starts without the agent
		}
		return types.NewError(types.ErrTryAgainLater, "meshlet agent unreachable: pod "+req.Pod.Namespace+"/"+req.Pod.Name+
			" cannot be checked against the mesh, so it does not start until meshlet answers", err.Error())
	}
	if resp.Outcome == wire.OutcomeFailed {
		return types.NewError(types.ErrTryAgainLater, "meshlet: pod "+req.Pod.Namespace+"/"+req.Pod.Name+
			" must join the mesh but could not be enrolled ("+resp.Reason+")", resp.Message)
	}
	return nil
}

// podNetworkResult is the pod network's result that ADD and CHECK act on. One
// with an IP entry that has no address is refused: passed on, it would
// print as "<nil>" for the runtime, and the pod would be enrolled without
// that address.
func podNetworkResult(conf *Config) (*current.Result, error) {
	if conf.PrevResult == nil {
		return nil, errNoPrevResult
	}
	r, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "meshlet-cni: prevResult: "+err.Error(), "")
	}
	for i, ip := range r.IPs {
		if ip == nil || ip.Address.IP == nil {
			return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("meshlet-cni: prevResult.ips[%d]: no address (the previous plugin's result is malformed)", i), "")
		}
	}
	return r, nil
}

// addresses are the pod's IPs in the previous result: those on an
// interface inside the pod (one with a sandbox), or on no interface named.
// An address the result puts on a host-side interface (a bridge, a veth's
// host end) is not the pod's.
func addresses(r *current.Result) []netip.Addr {
	var ips []netip.Addr
	for _, ip := range r.IPs {
		if i := ip.Interface; i != nil && *i >= 0 && *i < len(r.Interfaces) && r.Interfaces[*i].Sandbox == "" {
			continue
		}
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok {
			ips = append(ips, a.Unmap())
		}
	}
	return ips
}

// printTo writes the previous result, unchanged, in the configuration's
// version.
func printTo(out io.Writer, conf *Config) error {
	r, err := conf.PrevResult.GetAsVersion(conf.CNIVersion)
	if err != nil {
		return err
	}
	return r.PrintTo(out)
}
