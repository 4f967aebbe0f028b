package privtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RunAsNobody runs the test binary again as uid and gid 65534 (setpriv,
// from util-linux) with env added to its environment, and returns its
// combined output: for tests of what a peer that is not root gets from a
// socket. The package's TestMain must act on env. dirs (the socket's
// directory, say) and the binary's own directory are opened to others
// (0755): temporary directories are 0700.
func RunAsNobody(t testing.TB, env string, dirs ...string) string {
	t.Helper()
	RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) runs the client as another user: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range append(dirs, filepath.Dir(exe)) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", exe)
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test binary as uid 65534: %v\n%s", err, out)
	}
	return string(out)
}
