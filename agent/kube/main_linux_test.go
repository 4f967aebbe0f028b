package kube_test

import (
	"os"
	"testing"

	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env/kubeenv"
)

// shared is a real etcd + kube-apiserver shared by the tests (each test
// uses namespaces of its own).
var shared privtest.Shared[*kubeenv.Env]

func TestMain(m *testing.M) { os.Exit(kubeenv.RunTests(m, "agent/kube", &shared)) }

// api is the shared API server; without one (MESHLET_KUBE_BIN unset) the
// test is skipped, with the reason.
func api(t testing.TB) *kubeenv.Env {
	t.Helper()
	return shared.Get(t)
}
