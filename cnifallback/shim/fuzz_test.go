package shim

import (
	"bytes"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// FuzzParseConfig: the plugin's reading of its stdin (configuration and
// previous result) never panics, and what it accepts is usable.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"pods","type":"meshlet-cni","agentSocket":"/run/m.sock","prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.2/24"}]}}`))
	f.Add([]byte(`{"cniVersion":"0.3.1","prevResult":{"ips":[{"version":"4","address":"10.0.0.2/24"}]}}`))
	f.Add([]byte(`{"agentTimeout":"1ms","excludeNamespaces":["a"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		conf, err := ParseConfig(b)
		if err != nil {
			return
		}
		if conf.AgentSocket == "" || conf.timeout <= 0 {
			t.Fatalf("accepted an unusable configuration: %+v", conf)
		}
	})
}

// FuzzAddPassesPrevResult: for any stdin and CNI_ARGS of a non-pod
// container (no K8S_POD_UID, so no agent call), ADD either fails with a
// CNI error or prints the previous result with the same addresses, in
// the configuration's version: a chained plugin must not change the
// pod network's result.
func FuzzAddPassesPrevResult(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"pods","type":"meshlet-cni","prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.0.0.2/24","interface":0},{"address":"fd00::2/64"}]}}`), "IgnoreUnknown=1")
	f.Add([]byte(`{"cniVersion":"0.4.0","name":"pods","type":"meshlet-cni","prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}}`), "")
	f.Add([]byte(`{"cniVersion":"0.3.1","prevResult":{"ips":[{"version":"6","address":"::ffff:10.0.0.2/120"}]}}`), "K8S_POD_NAME=p")
	f.Add([]byte(`{"cniVersion":"1.0.0","prevResult":{"cniVersion":"0.3.0","ips":[]}}`), "a=b;c")
	f.Add([]byte(`{"cniVersion":"1.1.0"}`), "")
	f.Fuzz(func(t *testing.T, stdin []byte, cniArgs string) {
		args := &skel.CmdArgs{ContainerID: "c1", Netns: "/var/run/netns/c1", IfName: "eth0", Args: cniArgs, StdinData: stdin}
		if pod, err := podOf(args); err == nil && pod.UID != "" {
			return // a pod: ADD calls the agent (the wire targets cover that)
		}
		var out bytes.Buffer
		if err := Add(args, &out); err != nil {
			return
		}
		conf, err := ParseConfig(stdin)
		if err != nil {
			t.Fatalf("ADD succeeded on a configuration ParseConfig refuses: %v", err)
		}
		printed, err := version.NewResult(conf.CNIVersion, out.Bytes())
		if err != nil {
			t.Fatalf("ADD printed a result its own version %q cannot read: %v\n%s", conf.CNIVersion, err, out.Bytes())
		}
		got, err := current.NewResultFromResult(printed)
		if err != nil {
			t.Fatalf("printed result: %v", err)
		}
		want, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			t.Fatalf("ADD succeeded on a prevResult that does not convert: %v", err)
		}
		if a, b := addresses(got), addresses(want); !slices.Equal(a, b) {
			t.Fatalf("ADD printed addresses %v, the previous result had %v", a, b)
		}
	})
}
