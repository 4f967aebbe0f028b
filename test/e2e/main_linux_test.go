package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
)

// shared is the environment the tests share (containerd starts once); each
// test uses pods of its own and removes them.
var shared privtest.Shared[*env.Env]

// theEnv is the shared environment; without one (not root, or
// MESHLET_E2E_BIN unset) the test is skipped, with the reason.
func theEnv(t testing.TB) *env.Env {
	t.Helper()
	return shared.Get(t)
}

func TestMain(m *testing.M) {
	bin := shared.Require("e2e", "MESHLET_E2E_BIN", "the directory test/env/install-runtime.sh prints; `make test` sets it", true)
	if bin == "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "mle2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	e, err := env.Start(env.Options{BinDir: bin, Dir: dir, RequiredPlugins: []string{"meshlet"},
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "e2e: "+f+"\n", a...) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e environment:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	shared.Set(e)
	code := m.Run()
	if !stopRuntimeEnvs(code == 0) {
		code = 1
	}
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e teardown:", err)
		code = 1
	}
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "e2e: logs kept in", dir+"/logs")
	}
	os.Exit(code)
}
