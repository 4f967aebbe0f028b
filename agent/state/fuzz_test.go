package state

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParse: any bytes either are refused or give a checkpoint whose pods
// all have a UID (once), an inode and addresses, and that survives a write
// and a read unchanged.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"version":2,"pods":[]}`,
		`{"version":2,"pods":[{"uid":"a","name":"p","namespace":"n","serviceAccount":"sa","netnsInode":7,"ips":["192.0.2.1","2001:db8::1"],"settings":{"dnsCapture":true,"bypassInbound":false},"redirection":"nftables/v1 ipv4+ipv6 dns-capture inbound-capture"}]}`,
		`{"version":1,"pods":[{"uid":"a","netnsInode":1,"ips":["192.0.2.1"],"dnsCapture":true}]}`,
		`{"version":2,"pods":[{"uid":"a","netnsInode":1,"ips":["192.0.2.1"]},{"uid":"a","netnsInode":2,"ips":["192.0.2.2"]}]}`,
		`{"version":2,"pods":[{"uid":"a","netnsInode":1,"ips":[""]}]}`,
		`{"version":3,"bootID":"b1","pods":[{"uid":"a","sandboxID":"s","netnsInode":1,"netnsCookie":9,"ips":["192.0.2.1"]}]}`,
		`{"version":3,"pods":[]}`,
		`{`, `null`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := parse(b)
		if err != nil {
			return
		}
		if cp.Version == Version && cp.BootID == "" {
			t.Fatalf("accepted a version %d checkpoint without a boot ID", Version)
		}
		seen := map[string]bool{}
		for _, p := range cp.Pods {
			if p.UID == "" || seen[p.UID] || p.NetnsInode == 0 || len(p.IPs) == 0 {
				t.Fatalf("accepted an inconsistent pod %+v", p)
			}
			seen[p.UID] = true
		}
		out, err := json.Marshal(cp)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parse(out)
		if err != nil {
			t.Fatalf("a written checkpoint is refused: %v\n%s", err, out)
		}
		if len(cp.Pods) > 0 && !reflect.DeepEqual(again, cp) {
			t.Fatalf("round trip changed the checkpoint:\n%+v\n%+v", cp, again)
		}
	})
}
