package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestCreateBundle(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args   []string
		bundle string
		ok     bool
	}{
		{[]string{"--root", "/r", "create", "--bundle", "/b", "id"}, "/b", true},
		{[]string{"create", "-b", "/b", "id"}, "/b", true},
		{[]string{"create", "--bundle=/b", "id"}, "/b", true},
		{[]string{"run", "id"}, wd, true},
		{[]string{"--root", "/r", "start", "id"}, "", false},
		{[]string{"exec", "--bundle", "/b", "id"}, "", false},
	} {
		bundle, ok := createBundle(c.args)
		if bundle != c.bundle || ok != c.ok {
			t.Errorf("createBundle(%q) = %q, %v; want %q, %v", c.args, bundle, ok, c.bundle, c.ok)
		}
	}
}

func TestFixConfig(t *testing.T) {
	for _, c := range []struct {
		in, want string
		hugetlb  bool
	}{
		{`{"ociVersion":"1.0.2","process":{"oomScoreAdj":-998,"args":["/pause"]}}`, `{"ociVersion":"1.0.2","process":{"args":["/pause"],"oomScoreAdj":0}}`, false},
		{`{"process":{"oomScoreAdj":5}}`, `{"process":{"oomScoreAdj":5}}`, false},
		{`{"process":{"args":["x"]}}`, `{"process":{"args":["x"]}}`, false},
		{`{"process":{"args":["x"]},"linux":{"resources":{"cpu":{"shares":2},"hugepageLimits":[{"pageSize":"2MB","limit":0}]}}}`,
			`{"process":{"args":["x"]},"linux":{"resources":{"cpu":{"shares":2}}}}`, false},
		{`{"process":{"args":["x"]},"linux":{"resources":{"hugepageLimits":[{"pageSize":"2MB","limit":0}]}}}`,
			`{"process":{"args":["x"]},"linux":{"resources":{"hugepageLimits":[{"pageSize":"2MB","limit":0}]}}}`, true},
	} {
		path := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, []byte(c.in), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := fixConfig(path, c.hugetlb); err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var got, want any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(c.want), &want); err != nil {
			t.Fatal(err)
		}
		if gb, _ := json.Marshal(got); string(gb) != mustJSON(t, want) {
			t.Errorf("%s → %s, want %s", c.in, b, c.want)
		}
	}
	bad := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(bad, []byte(`{"process": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fixConfig(bad, false); err == nil {
		t.Fatal("a malformed config.json was accepted")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
