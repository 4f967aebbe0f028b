package main

import (
	"strings"
	"testing"
)

func TestGroupOf(t *testing.T) {
	for name, want := range map[string]string{
		"k8s.io/api/core/v1.(*Pod).Unmarshal":                                           "k8s.io/api/core",
		"type:k8s.io/client-go/informers/apps/v1.deploymentInformer":                    "k8s.io/client-go/informers",
		"go:itab.*k8s.io/api/apps/v1.Deployment,k8s.io/apimachinery/pkg/runtime.Object": "k8s.io/api/apps",
		"net/http.(*Transport).roundTrip":                                               "net",
		"runtime.mallocgc":                                                              "runtime",
		"google.golang.org/grpc/internal/transport.(*http2Client).reader":               "google.golang.org/grpc",
		"github.com/meshlet/meshlet/agent/redirect.applyNftablesOn":                     "github.com/meshlet/meshlet/agent",
	} {
		if got := groupOf(name); got != want {
			t.Errorf("groupOf(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestSum(t *testing.T) {
	in := `  4a0000    2000 T k8s.io/api/core/v1.(*Pod).Unmarshal
  4a1000    1000 T k8s.io/api/core/v1.(*Pod).Marshal
  4a2000     500 T runtime.mallocgc
  4a3000 33554432 D crypto/internal/fips140/drbg.memory
  4a4000       0 T runtime.text
`
	groups, total := sum(strings.NewReader(in))
	if total != 3500 || len(groups) != 2 || groups[0] != (group{"k8s.io/api/core", 3000}) || groups[1] != (group{"runtime", 500}) {
		t.Fatalf("sum = %v, %d", groups, total)
	}
}
