// Command oomrunc is runc for CRI-O on a test machine without
// CAP_SYS_RESOURCE: CRI-O gives the processes it starts a negative
// oom_score_adj (and has no setting to stop it), which such a machine
// refuses, so every container would fail to start. Before a container is
// created it raises a negative process.oomScoreAdj in the bundle's
// config.json to 0, then runs runc with the same arguments. Nothing else
// changes. A test harness's tool, never a node's.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

func main() { os.Exit(run()) }

func run() int {
	if bundle, ok := createBundle(os.Args[1:]); ok {
		if err := raiseOOMScoreAdj(filepath.Join(bundle, "config.json")); err != nil {
			fmt.Fprintln(os.Stderr, "oomrunc:", err)
			return 1
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		fmt.Fprintln(os.Stderr, "oomrunc:", err)
		return 1
	}
	err = syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "oomrunc: exec runc:", err)
	return 1
}

// createBundle returns the bundle of a `runc [global flags] create|run
// [flags] ID` command line: its --bundle/-b, or the working directory.
func createBundle(args []string) (string, bool) {
	create := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case !create && (a == "create" || a == "run"):
			create = true
		case create && (a == "--bundle" || a == "-b") && i+1 < len(args):
			return args[i+1], true
		case create && strings.HasPrefix(a, "--bundle="):
			return strings.TrimPrefix(a, "--bundle="), true
		case create && strings.HasPrefix(a, "-b="):
			return strings.TrimPrefix(a, "-b="), true
		}
	}
	if !create {
		return "", false
	}
	wd, err := os.Getwd()
	return wd, err == nil
}

// raiseOOMScoreAdj rewrites the OCI config's process.oomScoreAdj to 0 if
// it is negative, keeping every other field as it is.
func raiseOOMScoreAdj(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var process map[string]json.RawMessage
	if err := json.Unmarshal(cfg["process"], &process); err != nil {
		return fmt.Errorf("%s: process: %w", path, err)
	}
	var adj int
	if raw, ok := process["oomScoreAdj"]; !ok || json.Unmarshal(raw, &adj) != nil || adj >= 0 {
		return nil
	}
	process["oomScoreAdj"] = json.RawMessage("0")
	if cfg["process"], err = json.Marshal(process); err != nil {
		return err
	}
	if b, err = json.Marshal(cfg); err != nil {
		return err
	}
	tmp := path + ".oomrunc"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
