package draplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshlet/meshlet/agent/meshready"
)

// TestRun drives the plugin through its life with a fake API client (the
// kubelet side, registration and gRPC, is exercised on a real kubelet by
// test/e2e's TestDRA): a standby registers and publishes nothing; once it
// leads it publishes the node's device, tainted while the node cannot
// enroll and untainted when it can; a change of the node's IPv6 setting
// is republished; stopping taints it meshlet-stopped.
func TestRun(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "plugins_registry"), 0o755); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-uid"}})
	cfg := DefaultConfig()
	cfg.KubeletRootDir = root
	d, err := New(cfg, Deps{Client: client, NodeName: testNode, Claims: openStore(t, t.TempDir()), Pods: &fakePods{}, Policy: allowAll,
		Version: "v1", RedirectBackend: "nftables", IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Serving(); err == nil {
		t.Error("Serving before Run: nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	// The helper registers (its sockets appear), but a standby publishes
	// no slice.
	waitUntil(t, "the registration socket", func() bool {
		m, _ := filepath.Glob(filepath.Join(root, "plugins_registry", "*.sock"))
		return len(m) == 1
	})
	if slices := listSlices(t, client); len(slices) != 0 {
		t.Fatalf("a standby published %d slices", len(slices))
	}
	if err := d.Serving(); err != nil {
		t.Errorf("Serving while registered: %v", err)
	}

	var ready atomic.Bool
	d.Lead(Node{Records: noRecords{}, State: func() meshready.State {
		if ready.Load() {
			return meshready.State{Ready: true}
		}
		return meshready.State{Reason: "ztunnel-disconnected", Message: "no ztunnel"}
	}})
	wantTaint := func(value string) {
		t.Helper()
		waitUntil(t, "device taint "+value, func() bool {
			s := listSlices(t, client)
			if len(s) != 1 || len(s[0].Spec.Devices) != 1 {
				return false
			}
			taints := s[0].Spec.Devices[0].Taints
			if value == "" {
				return len(taints) == 0
			}
			return len(taints) == 1 && taints[0].Key == TaintKey(DefaultDriverName) && taints[0].Value == value &&
				taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule
		})
	}
	wantTaint("ztunnel-disconnected")
	ready.Store(true)
	wantTaint("")
	if !d.DeviceReady() {
		t.Fatal("DeviceReady false while the device is published untainted")
	}
	wantIPv6 := func(want bool) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("device attribute ipv6=%t", want), func() bool {
			s := listSlices(t, client)
			if len(s) != 1 || len(s[0].Spec.Devices) != 1 {
				return false
			}
			v := s[0].Spec.Devices[0].Attributes["ipv6"].BoolValue
			return v != nil && *v == want
		})
	}
	wantIPv6(true)
	d.SetIPv6(false)
	wantIPv6(false)
	wantTaint("") // the taint is as it was

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after a stop: %v", err)
		}
		done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	wantTaint(meshready.Stopped.Reason)
	if err := d.Serving(); err == nil || !strings.Contains(err.Error(), "not serving") {
		t.Errorf("Serving after Run returned: %v", err)
	}
}

func listSlices(t *testing.T, client *fake.Clientset) []resourceapi.ResourceSlice {
	t.Helper()
	l, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
