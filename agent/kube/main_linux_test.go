package kube_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/kube/kubeenv"
)

// api is a real etcd + kube-apiserver shared by the tests (each test uses
// namespaces of its own).
var api *kubeenv.Env

func TestMain(m *testing.M) {
	bin := privtest.MainEnv("agent/kube", "MESHLET_KUBE_BIN", "the directory test/kube/install.sh prints; `make test` sets it", false)
	dir, err := os.MkdirTemp("", "mlkube")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	api, err = kubeenv.Start(bin, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "API server:", err)
		os.Exit(1)
	}
	code := m.Run()
	api.Stop()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "API server logs kept in", dir)
	}
	os.Exit(code)
}
