package agent

import (
	"flag"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/internal/flagenv"
)

// FuzzFlagValue: any value for any flag, given on the command line or in
// the flag's environment variable (how the DaemonSet sets it), is read
// the same way both ways: refused both ways with an error naming the flag
// (or variable), or accepted both ways into the same Config, which
// Validate then judges the same (changing one flag of a valid
// configuration). A refusal names the flag; and a Config
// Validate accepts is accepted by every part's own validation that runs
// later (a bad setting is refused at start-up, never found when CNI mode
// starts).
func FuzzFlagValue(f *testing.F) {
	names := flagNames()
	for i, v := range []string{"n1", "/run/z.sock", "cni", "/run/nri.sock", "1x", "1500ms", "iptables", "legacy", "true",
		"", "/var/lib/meshlet", "127.0.0.1:0", "", "", "a, b,,c", "runsc", "0", "yes", "Mesh.Driver", "relative/dir", "-1", "x"} {
		f.Add(uint8(i), v)
	}
	for _, v := range []string{"kube-system,Not_A_Namespace", "kube-system, istio-system"} {
		f.Add(uint8(slices.Index(names, "excluded-namespaces")), v)
	}
	stateDir := f.TempDir()
	base := func() Config {
		cfg := DefaultConfig()
		cfg.NodeName = "node-1"
		cfg.StateDir = stateDir
		return cfg
	}
	if b := base(); b.Validate() != nil {
		f.Fatalf("the configuration fuzzed from is refused: %v", b.Validate())
	}
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		name := names[int(which)%len(names)]
		fromFlag, fsFlag := base(), newFlagSet()
		fromFlag.AddFlags(fsFlag)
		flagErr := fsFlag.Parse([]string{"--" + name + "=" + value})
		fromEnv, fsEnv := base(), newFlagSet()
		fromEnv.AddFlags(fsEnv)
		if err := fsEnv.Parse(nil); err != nil {
			t.Fatal(err)
		}
		envErr := flagenv.ApplyEnv(fsEnv, func(k string) (string, bool) { return value, k == flagenv.EnvName(name) })
		if (flagErr == nil) != (envErr == nil) {
			t.Fatalf("--%s=%q: the command line gives %v, the environment %v", name, value, flagErr, envErr)
		}
		if flagErr != nil {
			if !strings.Contains(flagErr.Error(), name) || !strings.Contains(envErr.Error(), flagenv.EnvName(name)) {
				t.Fatalf("errors do not name the flag: %v / %v", flagErr, envErr)
			}
			return
		}
		if !reflect.DeepEqual(fromFlag, fromEnv) {
			t.Fatalf("--%s=%q: the command line gives %+v, the environment %+v", name, value, fromFlag, fromEnv)
		}
		err := fromFlag.Validate()
		if envValidate := fromEnv.Validate(); errString(err) != errString(envValidate) {
			t.Fatalf("Validate: %v from the command line, %v from the environment", err, envValidate)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "--") {
				t.Fatalf("--%s=%q: refused without naming a flag: %v", name, value, err)
			}
			return
		}
		// CNI mode's installer is configured from the same settings
		// whichever mode the node ends up in (--mode auto picks later).
		icfg, ierr := fromFlag.CNI.InstallerConfig(fromFlag.CNIExcluded(), false)
		if ierr == nil {
			ierr = icfg.Validate()
		}
		if ierr != nil {
			t.Fatalf("--%s=%q passes Validate, but CNI mode would refuse it when it starts: %v", name, value, ierr)
		}
	})
}

// flagNames are the daemon's flags, in a stable order.
func flagNames() []string {
	cfg := DefaultConfig()
	fs := newFlagSet()
	cfg.AddFlags(fs)
	var names []string
	fs.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	return names
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("meshlet", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
