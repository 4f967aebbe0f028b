package kubeenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// AdminToken authenticates as a member of system:masters.
const AdminToken = "meshlet-test-admin-token"

// Env is a running control plane.
type Env struct {
	netns             string // empty: the test process's own
	dir, bin          string
	etcdURL           string
	apiPort           int
	etcd, apiserver   *exec.Cmd
	etcdDone, apiDone chan error
	apiserverArgs     []string // extra flags (feature gates)
	Logf              func(string, ...any)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs etcd and kube-apiserver from binDir (test/env/install-kube.sh) on
// the test process's loopback.
func Start(binDir, dir string) (*Env, error) { return StartIn(binDir, dir, "") }

// StartIn is Start inside the network namespace at netnsPath (empty: the
// process's own), where components under test (meshlet) can reach it;
// clients from Config dial into that namespace.
//
// apiserverArgs are extra kube-apiserver flags.
func StartIn(binDir, dir, netnsPath string, apiserverArgs ...string) (_ *Env, err error) {
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return nil, fmt.Errorf("%s missing in %q (run test/env/install-kube.sh): %w", b, binDir, err)
		}
	}
	e := &Env{dir: dir, bin: binDir, netns: netnsPath, apiserverArgs: apiserverArgs, Logf: func(string, ...any) {}}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	// A namespace of the test's own has every port free.
	clientPort, peerPort, apiPort := 2379, 2380, 6443
	if netnsPath == "" {
		if clientPort, err = freePort(); err != nil {
			return nil, err
		}
		if peerPort, err = freePort(); err != nil {
			return nil, err
		}
		if apiPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	e.apiPort = apiPort
	e.etcdURL = "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	e.etcd, e.etcdDone, err = e.start("etcd", filepath.Join(binDir, "etcd"),
		"--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", e.etcdURL, "--advertise-client-urls", e.etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "default="+peerURL,
		"--log-level", "warn")
	if err != nil {
		return nil, err
	}
	if err := e.writeCredentials(); err != nil {
		return nil, err
	}
	if err := e.StartAPIServer(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Env) writeCredentials() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	for name, data := range map[string][]byte{
		"sa.key": keyPEM, "sa.pub": pubPEM,
		"tokens.csv": []byte(AdminToken + ",admin,admin-uid,system:masters\n"),
	} {
		if err := os.WriteFile(filepath.Join(e.dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// StartAPIServer starts kube-apiserver (again, after StopAPIServer) and
// waits until it is ready.
func (e *Env) StartAPIServer() error {
	var err error
	e.apiserver, e.apiDone, err = e.start("kube-apiserver", filepath.Join(e.bin, "kube-apiserver"), append([]string{
		"--etcd-servers", e.etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port", strconv.Itoa(e.apiPort),
		"--endpoint-reconciler-type=none",
		"--service-account-key-file", filepath.Join(e.dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(e.dir, "sa.key"),
		"--service-account-issuer=https://meshlet.test",
		"--token-auth-file", filepath.Join(e.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--allow-privileged=true", // as kubeadm clusters run: node agents need it
		// Configuration only: nothing routes to it.
		"--service-cluster-ip-range=198.18.0.0/16",
		"--cert-dir", filepath.Join(e.dir, "certs")}, e.apiserverArgs...)...)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: e.Dial,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-e.apiDone:
			e.apiDone <- err
			return fmt.Errorf("kube-apiserver exited: %v (log %s)", err, e.logPath("kube-apiserver"))
		default:
		}
		req, _ := http.NewRequest("GET", e.URL()+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+AdminToken)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready after 60s (log %s)", e.logPath("kube-apiserver"))
}

// StopAPIServer stops kube-apiserver (etcd keeps the data).
func (e *Env) StopAPIServer() error {
	return stop(e.apiserver, e.apiDone)
}

func (e *Env) logPath(name string) string { return filepath.Join(e.dir, name+".log") }

func (e *Env) start(name, bin string, args ...string) (*exec.Cmd, chan error, error) {
	logf, err := os.OpenFile(e.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, args...)
	if e.netns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=" + e.netns, bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	return cmd, done, nil
}

func stop(cmd *exec.Cmd, done chan error) error {
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	done <- errors.New("stopped")
	return nil
}

// URL is the API server's address.
func (e *Env) URL() string { return "https://127.0.0.1:" + strconv.Itoa(e.apiPort) }

// Config is an admin client configuration.
func (e *Env) Config() *rest.Config {
	return e.ConfigWithToken(AdminToken)
}

// ConfigWithToken is a client configuration authenticating with token.
func (e *Env) ConfigWithToken(token string) *rest.Config {
	return &rest.Config{Host: e.URL(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		Timeout: 10 * time.Second, Dial: e.Dial}
}

// Dial connects from inside the control plane's network namespace.
func (e *Env) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if e.netns == "" {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return netnstest.Dial(ctx, e.netns, network, addr)
}

// Kubeconfig writes a kubeconfig for an admin client (for a daemon that
// runs in the same network namespace) and returns its path.
func (e *Env) Kubeconfig() (string, error) {
	path := filepath.Join(e.dir, "admin.kubeconfig")
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, e.URL(), AdminToken)
	return path, os.WriteFile(path, []byte(data), 0o600)
}

// Stop stops both processes.
func (e *Env) Stop() {
	if e.apiserver != nil {
		select {
		case err := <-e.apiDone:
			e.apiDone <- err
		default:
			_ = stop(e.apiserver, e.apiDone)
		}
	}
	if e.etcd != nil {
		_ = stop(e.etcd, e.etcdDone)
	}
}

// BinEnv names the variable holding the directory test/env/install-kube.sh
// prints.
const BinEnv = "MESHLET_KUBE_BIN"

// RunTests is the TestMain of a package whose tests share one control
// plane: it starts it (if BinEnv is set), runs the tests, stops it and
// keeps its logs when a test failed. Tests reach the control plane through
// shared.Get, which skips them, with the reason, when BinEnv is unset.
func RunTests(m *testing.M, pkg string, shared *privtest.Shared[*Env]) int {
	bin := shared.Require(pkg, BinEnv, "the directory test/env/install-kube.sh prints; `make test` sets it", false)
	if bin == "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "mlkube")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	e, err := Start(bin, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "API server:", err)
		return 1
	}
	shared.Set(e)
	code := m.Run()
	e.Stop()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "API server logs kept in", dir)
	}
	return code
}
