package shim

import "testing"

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
