package kube_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/meshlet/meshlet/test/kube/kubeenv"
)

// api is a real etcd + kube-apiserver shared by the tests (each test uses
// namespaces of its own).
var api *kubeenv.Env

func TestMain(m *testing.M) {
	bin := os.Getenv("MESHLET_KUBE_BIN")
	if bin == "" {
		msg := "API tests need MESHLET_KUBE_BIN (the directory test/kube/install.sh prints; `make test` sets it)"
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL: "+msg)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "SKIPPING agent/kube tests: "+msg)
		os.Exit(0)
	}
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
