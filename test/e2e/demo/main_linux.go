// Command demo is `make demo`: it starts a real containerd with NRI (in a
// network namespace of its own), the meshlet daemon and a ztunnel stand-in,
// runs a mesh pod and a plain pod, prints what happened, and cleans up.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/test/e2e/env"
)

func main() { os.Exit(run()) }

func run() int {
	bin := os.Getenv("MESHLET_E2E_BIN")
	if bin == "" || os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: run as root through `make demo` (it installs the runtime and sets MESHLET_E2E_BIN)")
		return 2
	}
	dir, err := os.MkdirTemp("", "mldemo")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	say("Starting containerd %s with NRI, runc and the CNI bridge plugin (private paths, own netns)…", "2.4.2")
	e, err := env.Start(env.Options{BinDir: bin, Dir: dir, RequiredPlugins: []string{"meshlet"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	defer func() {
		say("Cleaning up: pods removed, containerd stopped, namespace deleted.")
		if err := e.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: teardown:", err)
		}
	}()
	if err := demo(e, dir); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	return 0
}

func say(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func demo(e *env.Env, dir string) error {
	socket := filepath.Join(dir, "ztunnel.sock")
	m, err := e.StartMeshlet(socket, "--standalone")
	if err != nil {
		return err
	}
	defer m.Stop()
	zt := &zdstest.Ztunnel{}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err = zt.Start(socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ztunnel stand-in: %w", err)
		}
	}
	defer zt.Stop()
	if err := m.WaitReady(15 * time.Second); err != nil {
		return err
	}
	say("meshlet is ready (NRI plugin 10-meshlet registered, ZDS socket served, ztunnel stand-in connected).")

	meshSpec := env.PodSpec{Name: "productpage", Namespace: "bookinfo", UID: "demo-uid-productpage",
		Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}
	plainSpec := env.PodSpec{Name: "legacy", Namespace: "bookinfo", UID: "demo-uid-legacy"}
	start := time.Now()
	meshID, err := e.RunPod(meshSpec)
	if err != nil {
		return err
	}
	say("Created pod bookinfo/productpage (istio.io/dataplane-mode=ambient) in %v.", time.Since(start).Round(time.Millisecond))
	plainID, err := e.RunPod(plainSpec)
	if err != nil {
		return err
	}
	say("Created pod bookinfo/legacy (no mesh label).")
	meshInfo, err := e.InspectPod(meshID)
	if err != nil {
		return err
	}
	plainInfo, err := e.InspectPod(plainID)
	if err != nil {
		return err
	}
	ino, _ := env.Inode(meshInfo.NetnsPath)

	fmt.Println()
	say("What ztunnel received (before the sandbox was reported ready):")
	for _, r := range zt.Requests() {
		switch r.Kind {
		case zdstest.Add:
			match := "matches"
			if r.NetnsInode != ino {
				match = "DOES NOT match"
			}
			fmt.Printf("    Add uid=%s name=%s namespace=%s serviceAccount=%s, netns fd inode %d (%s the sandbox netns)\n",
				r.UID, r.Info.GetName(), r.Info.GetNamespace(), r.Info.GetServiceAccount(), r.NetnsInode, match)
		default:
			fmt.Printf("    %s\n", r)
		}
	}
	fmt.Println()
	say("Pods enrolled: productpage (IP %s). Not enrolled: legacy (IP %s) — no label.", meshInfo.IP, plainInfo.IP)
	fmt.Println()
	say("Redirection in productpage's network namespace (nft list table inet meshlet):")
	out, _ := exec.Command("nsenter", "--net="+meshInfo.NetnsPath, "nft", "list", "table", "inet", "meshlet").CombinedOutput()
	fmt.Print(indent(string(out)))
	out, _ = exec.Command("nsenter", "--net="+meshInfo.NetnsPath, "ip", "rule").CombinedOutput()
	say("Policy routing in productpage (ip rule):")
	fmt.Print(indent(string(out)))
	if err := exec.Command("nsenter", "--net="+plainInfo.NetnsPath, "nft", "list", "table", "inet", "meshlet").Run(); err != nil {
		say("legacy's network namespace has no meshlet table: untouched.")
	} else {
		say("UNEXPECTED: legacy has meshlet rules")
	}
	fmt.Println()
	_, metrics, err := m.Get("http://127.0.0.1:9881/metrics")
	if err == nil {
		say("meshlet metrics:")
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "meshlet_enrolled_pods") || strings.HasPrefix(line, "meshlet_ztunnel_connections") ||
				strings.HasPrefix(line, "meshlet_enroll_duration_seconds_sum") || strings.HasPrefix(line, "meshlet_enroll_duration_seconds_count") ||
				strings.HasPrefix(line, "meshlet_runtime_connected") {
				fmt.Println("    " + line)
			}
		}
	}
	if err := e.StopPod(meshID); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := zt.WaitFor(ctx, func(rs []*zdstest.Request) bool { return zdstest.Count(rs, zdstest.Del) > 0 }); err != nil {
		return err
	}
	fmt.Println()
	say("Stopped productpage: ztunnel got Del uid=%s.", meshSpec.UID)
	return nil
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}
