package shim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/meshlet/meshlet/cnifallback/wire"
)

// specVersions are the CNI versions with a prevResult: a chained plugin's.
var specVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// fakeAgent stands in for the agent's side of the wire, over a real
// SEQPACKET socket, answering every request the same way: the subject
// here is the plugin.
type fakeAgent struct {
	path   string
	answer wire.Response
	mu     sync.Mutex
	got    []*wire.Request
}

func newAgent(t *testing.T, answer wire.Outcome) *fakeAgent {
	t.Helper()
	a := &fakeAgent{path: filepath.Join(t.TempDir(), "cni.sock"), answer: wire.Response{Outcome: answer, Reason: "pod-label", Message: "no ztunnel connected"}}
	l, err := net.Listen(wire.Network, a.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r, err := wire.ReadRequest(c)
			if err == nil {
				a.mu.Lock()
				a.got = append(a.got, r)
				a.mu.Unlock()
				resp := a.answer
				_ = wire.WriteResponse(c, &resp)
			}
			c.Close()
		}
	}()
	return a
}

func (a *fakeAgent) requests() []*wire.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*wire.Request(nil), a.got...)
}

// prevResult is a bridge-like result in the given version.
func prevResult(t *testing.T, v string) types.Result {
	t.Helper()
	r := &current.Result{CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: "eth0", Mac: "0a:58:0a:01:02:03", Sandbox: "/var/run/netns/p"}},
		IPs:        []*current.IPConfig{{Interface: current.Int(0), Address: mustCIDR(t, "10.1.2.3/24"), Gateway: net.ParseIP("10.1.2.1")}, {Interface: current.Int(0), Address: mustCIDR(t, "fd00::3/64")}}}
	out, err := r.GetAsVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustCIDR(t *testing.T, s string) net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	n.IP = ip
	return *n
}

// stdin is a conflist entry for meshlet-cni with a previous result.
func stdin(t *testing.T, v, socket string, extra map[string]any, prev types.Result) []byte {
	t.Helper()
	conf := map[string]any{"cniVersion": v, "name": "pods", "type": "meshlet-cni", "agentSocket": socket, "agentTimeout": "2s"}
	if prev != nil {
		var buf bytes.Buffer
		if err := prev.PrintTo(&buf); err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		conf["prevResult"] = raw
	}
	for k, val := range extra {
		conf[k] = val
	}
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cmdArgs(data []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "c0ffee", Netns: "/var/run/netns/p", IfName: "eth0", StdinData: data,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=cart;K8S_POD_UID=5b1c;K8S_POD_INFRA_CONTAINER_ID=c0ffee"}
}

// TestAddPassesResultThrough: in every spec version with a prevResult, ADD
// hands the agent the pod (identity, netns, addresses) and prints the
// previous result unchanged.
func TestAddPassesResultThrough(t *testing.T) {
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			a := newAgent(t, wire.OutcomeEnrolled)
			prev := prevResult(t, v)
			var out bytes.Buffer
			if err := Add(cmdArgs(stdin(t, v, a.path, nil, prev)), &out); err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := prev.PrintTo(&want); err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, out.Bytes(), want.Bytes()) {
				t.Fatalf("printed %s\nwant the previous result %s", out.Bytes(), want.Bytes())
			}
			reqs := a.requests()
			if len(reqs) != 1 {
				t.Fatalf("the agent got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Command != wire.CommandAdd || r.ContainerID != "c0ffee" || r.Netns != "/var/run/netns/p" || r.IfName != "eth0" ||
				r.Pod != (wire.Pod{Namespace: "shop", Name: "cart", UID: "5b1c"}) || fmt.Sprint(r.IPs) != "[10.1.2.3 fd00::3]" {
				t.Fatalf("the agent got %+v", r)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("not JSON: %s", a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// TestAddOutcomes: what ADD does with each answer, and without one.
func TestAddOutcomes(t *testing.T) {
	prev := prevResult(t, "1.1.0")
	tryAgain := func(t *testing.T, err error, want string) {
		t.Helper()
		var te *types.Error
		if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater || !strings.Contains(te.Error(), want) {
			t.Fatalf("ADD = %v, want a try-again-later CNI error containing %q", err, want)
		}
	}
	t.Run("skipped passes through", func(t *testing.T) {
		a := newAgent(t, wire.OutcomeSkipped)
		var out bytes.Buffer
		if err := Add(cmdArgs(stdin(t, "1.1.0", a.path, nil, prev)), &out); err != nil || out.Len() == 0 {
			t.Fatalf("ADD = %v, output %q; want the previous result", err, out.String())
		}
	})
	t.Run("failed fails", func(t *testing.T) {
		a := newAgent(t, wire.OutcomeFailed)
		var out bytes.Buffer
		tryAgain(t, Add(cmdArgs(stdin(t, "1.1.0", a.path, nil, prev)), &out), "must join the mesh")
		if out.Len() != 0 {
			t.Fatalf("a failed ADD printed %s", out.String())
		}
	})
	missing := filepath.Join(t.TempDir(), "absent.sock")
	t.Run("agent unreachable fails closed", func(t *testing.T) {
		var out bytes.Buffer
		tryAgain(t, Add(cmdArgs(stdin(t, "1.1.0", missing, nil, prev)), &out), "meshlet agent unreachable")
	})
	t.Run("agent unreachable, excluded namespace", func(t *testing.T) {
		var out bytes.Buffer
		if err := Add(cmdArgs(stdin(t, "1.1.0", missing, map[string]any{"excludeNamespaces": []string{"shop"}}, prev)), &out); err != nil || out.Len() == 0 {
			t.Fatalf("ADD = %v, want the previous result for an excluded namespace", err)
		}
	})
	t.Run("not a Kubernetes pod", func(t *testing.T) {
		a := newAgent(t, wire.OutcomeFailed)
		args := cmdArgs(stdin(t, "1.1.0", a.path, nil, prev))
		args.Args = ""
		var out bytes.Buffer
		if err := Add(args, &out); err != nil || out.Len() == 0 || len(a.requests()) != 0 {
			t.Fatalf("ADD = %v, agent asked %d times; want the result passed through, the agent not asked", err, len(a.requests()))
		}
	})
	t.Run("no prevResult", func(t *testing.T) {
		var out bytes.Buffer
		if err := Add(cmdArgs(stdin(t, "1.1.0", missing, nil, nil)), &out); !errors.Is(err, errNoPrevResult) {
			t.Fatalf("ADD = %v, want it refused: a chained plugin needs a prevResult", err)
		}
	})
}

// TestDelCheckStatusGC: DEL tells the agent and never fails; CHECK fails
// when the agent says the pod is not as it must be, or cannot say; STATUS
// and GC succeed.
func TestDelCheckStatusGC(t *testing.T) {
	prev := prevResult(t, "1.1.0")
	a := newAgent(t, wire.OutcomeEnrolled)
	if err := Del(cmdArgs(stdin(t, "1.1.0", a.path, nil, nil))); err != nil {
		t.Fatal(err)
	}
	if r := a.requests(); len(r) != 1 || r[0].Command != wire.CommandDel || r[0].Pod.UID != "5b1c" {
		t.Fatalf("the agent got %+v for a DEL", r)
	}
	missing := filepath.Join(t.TempDir(), "absent.sock")
	if err := Del(cmdArgs(stdin(t, "1.1.0", missing, nil, nil))); err != nil {
		t.Fatalf("DEL without the agent: %v, want success", err)
	}
	if err := Del(cmdArgs([]byte(`{`))); err != nil {
		t.Fatalf("DEL with an unreadable configuration: %v, want success", err)
	}
	if err := Check(cmdArgs(stdin(t, "1.1.0", a.path, nil, prev))); err != nil {
		t.Fatalf("CHECK of an enrolled pod: %v", err)
	}
	if err := Check(cmdArgs(stdin(t, "1.1.0", newAgent(t, wire.OutcomeFailed).path, nil, prev))); err == nil {
		t.Fatal("CHECK of a pod the agent says is not enrolled: success")
	}
	if err := Check(cmdArgs(stdin(t, "1.1.0", missing, nil, prev))); err == nil {
		t.Fatal("CHECK without the agent: success")
	}
	if err := Status(cmdArgs(nil)); err != nil {
		t.Fatal(err)
	}
	if err := GC(cmdArgs(nil)); err != nil {
		t.Fatal(err)
	}
}

// TestConfigRefused: a bad conflist entry is refused with the field named
// and the spec's code: 7 for an invalid configuration, 6 for one that
// cannot be decoded (not skel's 999, an internal failure).
func TestConfigRefused(t *testing.T) {
	for extra, want := range map[string]struct {
		field string
		code  uint
	}{
		`"agentSocket":"run/cni.sock"`: {"agentSocket", types.ErrInvalidNetworkConfig},
		`"agentTimeout":"soon"`:        {"agentTimeout", types.ErrInvalidNetworkConfig},
		`"agentTimeout":"-1s"`:         {"agentTimeout", types.ErrInvalidNetworkConfig},
		`"excludeNamespaces":[""]`:     {"excludeNamespaces[0]", types.ErrInvalidNetworkConfig},
		`"prevResult":{"ips":"nope"}`:  {"prevResult", types.ErrDecodingFailure},
		`"agentSocket":5`:              {"configuration", types.ErrDecodingFailure},
	} {
		_, err := ParseConfig([]byte(`{"cniVersion":"1.1.0","name":"pods","type":"meshlet-cni",` + extra + `}`))
		var te *types.Error
		if !errors.As(err, &te) || te.Code != want.code || !strings.Contains(err.Error(), want.field) {
			t.Errorf("%s: %v, want CNI error %d naming %s", extra, err, want.code, want.field)
		}
	}
	var out bytes.Buffer
	var te *types.Error
	if err := Add(cmdArgs(stdin(t, "1.1.0", "/run/m.sock", nil, nil)), &out); !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig {
		t.Errorf("ADD without a prevResult: %v, want CNI error %d: the conflist is wrong", err, types.ErrInvalidNetworkConfig)
	}
	// An IP entry without an address would be printed as "<nil>" and the
	// pod enrolled without it.
	noAddress := `{"cniVersion":"1.1.0","name":"pods","type":"meshlet-cni","prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.2/24"},{"interface":0}]}}`
	args := cmdArgs([]byte(noAddress))
	if err := Add(args, &out); !errors.As(err, &te) || te.Code != types.ErrDecodingFailure || !strings.Contains(err.Error(), "prevResult.ips[1]") || out.Len() != 0 {
		t.Errorf("ADD with an address-less IP in prevResult: %v (printed %q), want CNI error %d naming prevResult.ips[1] and nothing printed", err, out.String(), types.ErrDecodingFailure)
	}
	conf, err := ParseConfig([]byte(`{"cniVersion":"1.1.0","name":"pods","type":"meshlet-cni"}`))
	if err != nil || conf.AgentSocket != DefaultAgentSocket || conf.timeout != DefaultAgentTimeout {
		t.Fatalf("defaults: %+v, %v", conf, err)
	}
}
