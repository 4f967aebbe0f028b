// Command oomrunc is runc for CRI-O on a test machine without
// CAP_SYS_RESOURCE and without a hugetlb cgroup hierarchy. CRI-O gives the
// processes it starts a negative oom_score_adj (and has no setting to stop
// it), which such a machine refuses; and it passes on the kubelet's
// hugepage limits whenever the kernel lists the hugetlb controller, mounted
// or not, which runc then cannot set: every such container would fail to
// start. Before a container is created it raises a negative
// process.oomScoreAdj in the bundle's config.json to 0 and, where no
// hugetlb hierarchy is mounted, drops linux.resources.hugepageLimits; then
// it runs runc with the same arguments. Nothing else changes. A test
// harness's tool, never a node's.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

func main() { os.Exit(run()) }

func run() int {
	if bundle, ok := createBundle(os.Args[1:]); ok {
		if err := fixConfig(filepath.Join(bundle, "config.json"), hugetlbMounted()); err != nil {
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

// hugetlbMounted reports whether a hugetlb cgroup hierarchy is mounted
// (cgroup v1's, or the v2 unified hierarchy's controller).
func hugetlbMounted() bool {
	if _, err := os.Stat("/sys/fs/cgroup/hugetlb"); err == nil {
		return true
	}
	b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	return err == nil && slices.Contains(strings.Fields(string(b)), "hugetlb")
}

// fixConfig rewrites the OCI config's process.oomScoreAdj to 0 if it is
// negative and, without hugetlb, drops linux.resources.hugepageLimits,
// keeping every other field as it is. It writes nothing when neither
// applies.
func fixConfig(path string, hugetlb bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	oom, err := raiseOOMScoreAdj(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	huge := false
	if !hugetlb {
		if huge, err = dropHugepageLimits(cfg); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if !oom && !huge {
		return nil
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

// raiseOOMScoreAdj sets cfg's process.oomScoreAdj to 0 if it is negative.
func raiseOOMScoreAdj(cfg map[string]json.RawMessage) (bool, error) {
	var process map[string]json.RawMessage
	if err := json.Unmarshal(cfg["process"], &process); err != nil {
		return false, fmt.Errorf("process: %w", err)
	}
	var adj int
	if raw, ok := process["oomScoreAdj"]; !ok || json.Unmarshal(raw, &adj) != nil || adj >= 0 {
		return false, nil
	}
	process["oomScoreAdj"] = json.RawMessage("0")
	var err error
	cfg["process"], err = json.Marshal(process)
	return true, err
}

// dropHugepageLimits removes cfg's linux.resources.hugepageLimits.
func dropHugepageLimits(cfg map[string]json.RawMessage) (bool, error) {
	raw, ok := cfg["linux"]
	if !ok {
		return false, nil
	}
	var linux map[string]json.RawMessage
	if err := json.Unmarshal(raw, &linux); err != nil {
		return false, fmt.Errorf("linux: %w", err)
	}
	var resources map[string]json.RawMessage
	if r, ok := linux["resources"]; !ok || json.Unmarshal(r, &resources) != nil {
		return false, nil
	}
	if _, ok := resources["hugepageLimits"]; !ok {
		return false, nil
	}
	delete(resources, "hugepageLimits")
	var err error
	if linux["resources"], err = json.Marshal(resources); err != nil {
		return false, err
	}
	cfg["linux"], err = json.Marshal(linux)
	return true, err
}
