package env

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// Meshlet is a meshlet daemon running in the environment's netns.
type Meshlet struct {
	cmd       *exec.Cmd
	exited    chan error
	HealthURL string
	Client    *http.Client // dials inside the environment's netns
	LogPath   string
}

// NodeName is the node meshlet serves in the environment.
const NodeName = "e2e"

// MeshletHealthAddr is where the daemon serves /healthz, /readyz and (same
// port + 1) /metrics, on the environment's loopback.
const MeshletHealthAddr = "127.0.0.1:9880"

// StartMeshlet runs the meshlet binary (NRI mode, or CNI mode when the
// environment's containerd has no NRI) in the environment's
// netns, talking to its containerd, with ztunnel's socket at ztunnelSocket.
// extra flags are appended (--standalone, or --kubeconfig).
func (e *Env) StartMeshlet(ztunnelSocket string, extra ...string) (*Meshlet, error) {
	logPath := e.path("logs", "meshlet.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := append([]string{"--net=" + e.NetnsPath(), e.Meshlet,
		"--node-name=" + NodeName, "--nri-socket=" + e.NRISocket, "--state-dir=" + e.MeshletStateDir(), "--ztunnel-socket=" + ztunnelSocket,
		"--health-addr=" + MeshletHealthAddr, "--metrics-addr=127.0.0.1:9881", "-v=2",
		// Used when meshlet picks CNI mode (containerd without NRI).
		"--cni-conf-dir=" + e.CNIConfDir(), "--cni-bin-dir=" + e.CNIBinDir(), "--cni-socket=" + e.CNISocket(), "--cri-socket=" + e.CRISocket,
		// Used with DRA: the container gate.
		"--cdi-spec-dir=" + e.CDISpecDir(), "--gate-hook-dir=" + e.GateHookDir(), "--gate-socket=" + e.GateSocket()}, extra...)
	cmd := exec.Command("nsenter", args...)
	cmd.Env = withoutHarnessEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	m := &Meshlet{cmd: cmd, exited: make(chan error, 1), LogPath: logPath, HealthURL: "http://" + MeshletHealthAddr}
	go func() { m.exited <- cmd.Wait(); logf.Close() }()
	nsPath := e.NetnsPath()
	m.Client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return netnstest.Dial(ctx, nsPath, network, addr)
		},
	}}
	return m, nil
}

// Pid is the daemon's process id (nsenter execs it in place).
func (m *Meshlet) Pid() int { return m.cmd.Process.Pid }

// Get fetches a path from the daemon's health (or metrics, with port 9881)
// endpoint.
func (m *Meshlet) Get(url string) (int, string, error) {
	resp, err := m.Client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// WaitReady polls /readyz until it answers 200.
func (m *Meshlet) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-m.exited:
			m.exited <- err
			return fmt.Errorf("meshlet exited: %v (log %s)", err, m.LogPath)
		default:
		}
		code, body, err := m.Get(m.HealthURL + "/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("%d %s %v", code, body, err)
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("meshlet not ready after %v: %s (log %s)", timeout, last, m.LogPath)
}

// Stop sends SIGTERM and waits for a clean exit.
func (m *Meshlet) Stop() error {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.exited:
		m.exited <- err
		return err
	case <-time.After(15 * time.Second):
		_ = m.cmd.Process.Kill()
		return fmt.Errorf("meshlet did not stop within 15s of SIGTERM")
	}
}

// HeldNetns returns how many fds the daemon holds on each network
// namespace, by inode.
func (m *Meshlet) HeldNetns() (map[uint64]int, error) { return netnstest.HeldNetns(m.Pid()) }

// Inode returns a netns path's inode.
func Inode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Kill stops the daemon with SIGKILL: no shutdown step runs.
func (m *Meshlet) Kill() error {
	_ = m.cmd.Process.Kill()
	err := <-m.exited
	m.exited <- err
	return nil
}

// MeshletStateDir is the daemon's --state-dir.
func (e *Env) MeshletStateDir() string { return e.path("meshlet-state") }

// withoutHarnessEnv is environ without the test harness's MESHLET_*
// variables (MESHLET_E2E_BIN and the like): meshlet reads each MESHLET_*
// variable as a flag's and warns about any other, so it starts with an
// environment like the DaemonSet's.
func withoutHarnessEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "MESHLET_") {
			out = append(out, kv)
		}
	}
	return out
}
