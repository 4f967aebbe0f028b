package cri

import (
	"errors"
	"fmt"

	"github.com/meshlet/meshlet/agent/enroll"
)

// SameRuntime is NRI mode's ReconcilerConfig.Check: a listing is used only
// from the runtime NRI serves, since another runtime's (a wrong
// --cri-socket) would take every pod for gone. nri names the runtime NRI
// connected to, "" before its first connection. The names must match, and
// until a listing has shown a pod the core knows from NRI (the check is
// then anchored), none is used: two runtimes of the same name (a k3s
// containerd next to the system's) tell apart no other way.
func SameRuntime(nri func() string) func(l Listing, known []enroll.PodStatus, pods []enroll.Pod, unreadable []string) error {
	anchored := false
	return func(l Listing, known []enroll.PodStatus, pods []enroll.Pod, unreadable []string) error {
		want := nri()
		if name, version := l.Runtime(); want == "" || name != want {
			return fmt.Errorf("the CRI socket (--cri-socket) serves %s %s, NRI serves %q: its pods are not the ones meshlet enrolls", name, version, want)
		}
		if anchored || len(known) == 0 {
			return nil // with nothing known, nothing is forgotten
		}
		if !listsAny(known, pods, unreadable) {
			return errors.New("the CRI socket (--cri-socket) lists none of the pods meshlet knows from NRI: it is not the same runtime, or they are all gone (then the next pod enrolled settles it)")
		}
		anchored = true
		return nil
	}
}

// listsAny is whether the listing shows any of the known pods.
func listsAny(known []enroll.PodStatus, pods []enroll.Pod, unreadable []string) bool {
	uids := make(map[string]bool, len(known))
	for _, st := range known {
		uids[st.UID] = true
	}
	for _, p := range pods {
		if uids[p.UID] {
			return true
		}
	}
	for _, uid := range unreadable {
		if uids[uid] {
			return true
		}
	}
	return false
}
