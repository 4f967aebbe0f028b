package gate

import (
	"flag"
	"fmt"
	"io"
	"time"
)

// Defaults of the hook's flags, which the CDI spec sets.
const (
	DefaultSocket  = "/var/run/meshlet/gate.sock"
	DefaultTimeout = 2 * time.Second
)

// Exit codes: any non-zero one refuses the container.
const (
	ExitAllowed = 0
	ExitRefused = 1
	ExitUsage   = 2
)

// Main is the hook: it reads the OCI state from stdin, asks meshlet and
// returns the exit code. Every refusal is one line on stderr, which the
// runtime puts in the container's start error.
func Main(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("meshlet-gate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", DefaultSocket, "meshlet's gate socket")
	timeout := fs.Duration("timeout", DefaultTimeout, "how long to wait for meshlet's answer; no answer refuses the container")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 || *timeout <= 0 || *socket == "" {
		fmt.Fprintf(stderr, "meshlet-gate: want only --socket and --timeout (> 0); got %q\n", args)
		return ExitUsage
	}
	refuse := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "meshlet-gate: container refused: "+format+"\n", a...)
		return ExitRefused
	}
	b, err := io.ReadAll(io.LimitReader(stdin, MaxStateSize+1))
	if err != nil {
		return refuse("reading the OCI state: %v", err)
	}
	st, err := ParseState(b)
	if err != nil {
		return refuse("%v", err)
	}
	inode, err := NetnsInode(st.Pid)
	if err != nil {
		return refuse("the container's network namespace: %v", err)
	}
	resp, err := Ask(*socket, &Request{NetnsInode: inode, ContainerID: st.ID, PodUID: st.PodUID, SandboxID: st.SandboxID}, *timeout)
	if err != nil {
		return refuse("meshlet did not answer within %v, so the pod cannot be known to be in the mesh: %v", *timeout, err)
	}
	if !resp.Allow {
		return refuse("%s", resp.Reason)
	}
	return ExitAllowed
}
