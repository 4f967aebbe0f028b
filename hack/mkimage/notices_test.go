package main

import (
	"bytes"
	"context"
	"testing"
)

// TestThirdPartyNotices: the modules' NOTICE files, each under a header
// naming the module and version: grpc's and Prometheus's (Apache-2.0, each
// with a NOTICE) among them, the main module's own not.
func TestThirdPartyNotices(t *testing.T) {
	b, err := thirdPartyNotices(context.Background(), "../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"==== google.golang.org/grpc@", "==== github.com/prometheus/client_golang@"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("no %q in:\n%s", want, b)
		}
	}
	if bytes.Contains(b, []byte("==== github.com/meshlet/meshlet")) {
		t.Error("the main module's own NOTICE among the third parties'")
	}
}
