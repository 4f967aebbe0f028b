package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/privtest"
)

// gitRepo makes a repository with one commit at a known time.
func gitRepo(t *testing.T) string {
	t.Helper()
	privtest.RequireCommand(t, "git", "the Debian package git")
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "one"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE=2024-01-02T03:04:05Z", "GIT_AUTHOR_DATE=2024-01-02T03:04:05Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	return dir
}

func TestGitMeta(t *testing.T) {
	dir := gitRepo(t)
	t.Setenv("SOURCE_DATE_EPOCH", "")
	m, err := gitMeta(t.Context(), dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != "dev" {
		t.Errorf("untagged: version %q, want dev", m.Version)
	}
	if len(m.Revision) != 40 {
		t.Errorf("revision %q, want a commit hash", m.Revision)
	}
	if want := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC); !m.Epoch.Equal(want) {
		t.Errorf("epoch %s, want the commit time %s", m.Epoch, want)
	}
	if out, err := exec.Command("git", "-C", dir, "tag", "v1.2.3").CombinedOutput(); err != nil {
		t.Fatalf("git tag: %v: %s", err, out)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "86400")
	if m, err = gitMeta(t.Context(), dir, "", ""); err != nil {
		t.Fatal(err)
	}
	if m.Version != "v1.2.3" || m.Ref() != "localhost/meshlet/meshlet:v1.2.3" {
		t.Errorf("tagged: version %q ref %q, want v1.2.3", m.Version, m.Ref())
	}
	if !m.Epoch.Equal(time.Unix(86400, 0)) {
		t.Errorf("epoch %s, want SOURCE_DATE_EPOCH's", m.Epoch)
	}
	if _, err := gitMeta(t.Context(), dir, "not/a:tag", ""); err == nil {
		t.Error("an invalid tag was accepted")
	}
}

// TestVersionAsMakefile: make image passes the Makefile's VERSION; the tool
// computes the same when run alone.
func TestVersionAsMakefile(t *testing.T) {
	privtest.RequireCommand(t, "make", "the Debian package make")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "version")
	cmd.Dir = root
	// As if run by hand: no VERSION, nothing from an enclosing make.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "VERSION" && k != "MAKEFLAGS" && k != "MAKELEVEL" && k != "MFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make version: %v", err)
	}
	m, err := gitMeta(t.Context(), root, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != m.Version {
		t.Errorf("make version printed %q, the tool computes %q", got, m.Version)
	}
}
