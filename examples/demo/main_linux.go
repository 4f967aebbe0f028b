// Command demo is `make demo`: it starts a real runtime with NRI (in a
// network namespace of its own; containerd 2.x, or with --runtime
// containerd-1.7 or crio), the meshlet daemon and a ztunnel stand-in, runs
// a mesh pod and a plain pod, prints what happened, and cleans up.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/examples/internal/narrate"
	"github.com/meshlet/meshlet/test/env"
)

// story tells the demo's story: on the terminal, or to its test.
var story = narrate.New("demo", os.Stdout, os.Stderr)

func main() { os.Exit(run(os.Args[1:])) }

// runtimes are the runtimes the demo runs: what it calls each, and the
// variable its installer's directory comes in (make demo sets it).
var runtimes = map[env.Runtime]struct{ title, binVar string }{
	env.Containerd:   {"containerd 2.4.2", "MESHLET_E2E_BIN"},
	env.Containerd17: {"containerd 1.7.35", "MESHLET_CONTAINERD17_BIN"},
	env.CRIO:         {"CRI-O 1.34.0", "MESHLET_CRIO_BIN"},
}

// run is the demo with the command line's args; it returns the exit
// status.
func run(args []string) int {
	runtime := env.Containerd
	flags := flag.NewFlagSet("demo", flag.ContinueOnError)
	flags.Func("runtime", "the runtime to run pods with: containerd (2.x), containerd-1.7 or crio", func(v string) error {
		if _, ok := runtimes[env.Runtime(v)]; !ok {
			return fmt.Errorf("unknown runtime %q (known: %s, %s, %s)", v, env.Containerd, env.Containerd17, env.CRIO)
		}
		runtime = env.Runtime(v)
		return nil
	})
	if err := flags.Parse(args); err != nil {
		return 2
	}
	rt := runtimes[runtime]
	bin, rtBin := os.Getenv("MESHLET_E2E_BIN"), os.Getenv(rt.binVar)
	if bin == "" || rtBin == "" || os.Geteuid() != 0 {
		story.Errorf("demo: run as root through `make demo` (DEMO_RUNTIME=%s: it installs the runtime and sets MESHLET_E2E_BIN and %s)\n", runtime, rt.binVar)
		return 2
	}
	dir, err := os.MkdirTemp("", "mldemo")
	if err != nil {
		story.Errorln(err)
		return 1
	}
	defer os.RemoveAll(dir)
	story.Say("Starting %s with NRI, runc and the CNI bridge plugin (private paths, own netns)…", rt.title)
	opts := env.Options{BinDir: bin, Runtime: runtime, RuntimeBinDir: rtBin, Dir: dir}
	if runtime == env.Containerd {
		// Fail closed while meshlet is away: only containerd 2.x has the
		// validator (deploy/README, "Runtimes meshlet is tested on").
		opts.RequiredPlugins = []string{"meshlet"}
	}
	e, err := env.Start(opts)
	if err != nil {
		story.Errorln(err)
		return 1
	}
	defer func() {
		story.Say("Cleaning up: pods removed, %s stopped, namespace deleted.", rt.title)
		if err := e.Stop(); err != nil {
			story.Errorln("teardown:", err)
		}
	}()
	if err := demo(e, dir); err != nil {
		story.Errorln(err)
		return 1
	}
	return 0
}

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
	story.Say("meshlet is ready (NRI plugin 10-meshlet registered, ZDS socket served, ztunnel stand-in connected).")

	meshSpec := env.PodSpec{Name: "productpage", Namespace: "bookinfo", UID: "demo-uid-productpage",
		Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}
	plainSpec := env.PodSpec{Name: "legacy", Namespace: "bookinfo", UID: "demo-uid-legacy"}
	start := time.Now()
	meshID, err := e.RunPod(meshSpec)
	if err != nil {
		return err
	}
	story.Say("Created pod bookinfo/productpage (istio.io/dataplane-mode=ambient) in %v.", time.Since(start).Round(time.Millisecond))
	plainID, err := e.RunPod(plainSpec)
	if err != nil {
		return err
	}
	story.Say("Created pod bookinfo/legacy (no mesh label).")
	meshInfo, err := e.InspectPod(meshID)
	if err != nil {
		return err
	}
	plainInfo, err := e.InspectPod(plainID)
	if err != nil {
		return err
	}
	ino, _ := env.Inode(meshInfo.NetnsPath)

	story.Println()
	story.Say("What ztunnel received (before the sandbox was reported ready):")
	for _, r := range zt.Requests() {
		switch r.Kind {
		case zdstest.Add:
			match := "matches"
			if r.NetnsInode != ino {
				match = "DOES NOT match"
			}
			story.Printf("    Add uid=%s name=%s namespace=%s serviceAccount=%s, netns fd inode %d (%s the sandbox netns)\n",
				r.UID, r.Info.GetName(), r.Info.GetNamespace(), r.Info.GetServiceAccount(), r.NetnsInode, match)
		default:
			story.Printf("    %s\n", r)
		}
	}
	story.Println()
	story.Say("Pods enrolled: productpage (IP %s). Not enrolled: legacy (IP %s) — no label.", meshInfo.IP, plainInfo.IP)
	story.Println()
	story.Say("Redirection in productpage's network namespace (nft list table inet meshlet):")
	out, _ := exec.Command("nsenter", "--net="+meshInfo.NetnsPath, "nft", "list", "table", "inet", "meshlet").CombinedOutput()
	story.Print(narrate.Indent(string(out)))
	out, _ = exec.Command("nsenter", "--net="+meshInfo.NetnsPath, "ip", "rule").CombinedOutput()
	story.Say("Policy routing in productpage (ip rule):")
	story.Print(narrate.Indent(string(out)))
	if err := exec.Command("nsenter", "--net="+plainInfo.NetnsPath, "nft", "list", "table", "inet", "meshlet").Run(); err != nil {
		story.Say("legacy's network namespace has no meshlet table: untouched.")
	} else {
		story.Say("UNEXPECTED: legacy has meshlet rules")
	}
	story.Println()
	_, metrics, err := m.Get("http://127.0.0.1:9881/metrics")
	if err == nil {
		story.Say("meshlet metrics:")
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "meshlet_enrolled_pods") || strings.HasPrefix(line, "meshlet_ztunnel_connections") ||
				strings.HasPrefix(line, "meshlet_enroll_duration_seconds_sum") || strings.HasPrefix(line, "meshlet_enroll_duration_seconds_count") ||
				strings.HasPrefix(line, "meshlet_runtime_connected") {
				story.Println("    " + line)
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
	story.Println()
	story.Say("Stopped productpage: ztunnel got Del uid=%s.", meshSpec.UID)
	return nil
}
