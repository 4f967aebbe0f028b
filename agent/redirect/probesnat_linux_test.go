package redirect

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// TestRetainKeepsPodsEnrolledMeanwhile: the cleanup after the runtime's
// Synchronize is given the addresses of the pods enrolled when it started;
// a pod enrolled since (its address added by this meshlet, its record not
// yet in that list) keeps its probe SNAT entry, while a leftover of a pod
// removed while no meshlet ran goes. Adds racing the cleanup keep theirs
// too.
func TestRetainKeepsPodsEnrolledMeanwhile(t *testing.T) {
	host := netnstest.Open(t)
	h, err := newNftHostSNAT(netnstest.Fd(t, host), TableName)
	must(t, err)
	leftover, enrolled := netip.MustParseAddr("192.0.2.20"), netip.MustParseAddr("192.0.2.21")
	must(t, h.Add([]netip.Addr{leftover})) // a previous meshlet's pod, removed while none ran
	p := newProbeSNAT(h)
	must(t, p.add("enrolled", []netip.Addr{enrolled}))
	must(t, p.retain(nil)) // the list was taken before the pod was enrolled
	if list := nftTable(t, host); !strings.Contains(list, "elements = { 192.0.2.21 }") {
		t.Fatalf("after the cleanup, want the enrolled pod's address alone:\n%s", list)
	}
	// Released: the cleanup no longer keeps it.
	must(t, p.delete("enrolled", []netip.Addr{enrolled}))
	must(t, h.Add([]netip.Addr{enrolled})) // as if a failed delete had left it
	must(t, p.retain(nil))
	if list := nftTable(t, host); strings.Contains(list, "192.0.2.2") {
		t.Fatalf("a released pod's address survived the cleanup:\n%s", list)
	}

	// Adds while cleanups run: every added address is there at the end.
	var wg sync.WaitGroup
	var added []netip.Addr
	errs := make(chan error, 60)
	for i := range 50 {
		ip := netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)})
		added = append(added, ip)
		wg.Go(func() { errs <- p.add(ip.String(), []netip.Addr{ip}) })
		if i%10 == 0 {
			wg.Go(func() { errs <- p.retain(nil) })
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	list := nftTable(t, host)
	for _, ip := range added {
		if !strings.Contains(list, ip.String()) {
			t.Fatalf("%s, added while cleanups ran, is gone:\n%s", ip, list)
		}
	}
}

// TestProbeSNATHeldByEachPod: an address two pods hold (a live pod reusing
// the IP of a stale one whose release comes late) stays in the node's set
// until both let it go; a failed add claims nothing it did not hold.
func TestProbeSNATHeldByEachPod(t *testing.T) {
	host := netnstest.Open(t)
	h, err := newNftHostSNAT(netnstest.Fd(t, host), TableName)
	must(t, err)
	p := newProbeSNAT(h)
	ip := []netip.Addr{netip.MustParseAddr("192.0.2.30")}
	must(t, p.add("stale", ip))
	must(t, p.add("live", ip))
	must(t, p.delete("stale", ip))
	if list := nftTable(t, host); !strings.Contains(list, "192.0.2.30") {
		t.Fatalf("the stale pod's release took the live pod's address:\n%s", list)
	}
	must(t, p.delete("live", ip))
	if list := nftTable(t, host); strings.Contains(list, "192.0.2.30") {
		t.Fatalf("the address outlived its last holder:\n%s", list)
	}

	// A holder whose second add fails still holds the address.
	must(t, p.add("pod", ip))
	p.host = failingAdds{h}
	if err := p.add("pod", append(ip, netip.MustParseAddr("192.0.2.31"))); err == nil {
		t.Fatal("add succeeded through a failing set")
	}
	p.host = h
	must(t, p.retain(nil))
	if list := nftTable(t, host); !strings.Contains(list, "192.0.2.30") {
		t.Fatalf("a failed add dropped the address its pod held before:\n%s", list)
	}
}

// failingAdds is a host SNAT whose adds fail.
type failingAdds struct{ hostSNAT }

func (failingAdds) Add([]netip.Addr) error { return errors.New("set full (test)") }
