package zds_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/agent/zds/zdspb"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/internal/unixsock"
)

const wait = 5 * time.Second

func socketPath(t testing.TB) string {
	return filepath.Join(zdstest.SocketDir(t), "ztunnel.sock")
}

func startServer(t testing.TB, cfg zds.Config) *zds.Server {
	t.Helper()
	privtest.RequireRoot(t)
	if cfg.SocketPath == "" {
		cfg.SocketPath = socketPath(t)
	}
	s, err := zds.Listen(cfg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = s.Close()
	})
	return s
}

func dial(t testing.TB, s *zds.Server) *zdstest.Client {
	t.Helper()
	c, err := zdstest.Dial(s.Addr())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// connect dials and consumes the snapshot, returning its requests.
func connect(t testing.TB, s *zds.Server) (*zdstest.Client, []*zdstest.Request) {
	t.Helper()
	c := dial(t, s)
	snap, err := c.ReadSnapshot(wait)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	t.Cleanup(func() {
		for _, r := range snap {
			r.Close()
		}
	})
	return c, snap
}

func workload(t testing.TB, uid string) *enroll.Workload {
	h := netnstest.Open(t)
	return &enroll.Workload{Record: enroll.Record{UID: uid, Name: "pod-" + uid, Namespace: "ns-" + uid,
		ServiceAccount: "sa-" + uid, NetnsInode: h.Inode()}, Netns: h}
}

// addAcked runs AddWorkload while c answers it, and returns what c saw.
func addAcked(t testing.TB, s *zds.Server, c *zdstest.Client, w *enroll.Workload) *zdstest.Request {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.AddWorkload(context.Background(), w, enroll.HandoverNow) }()
	r, err := c.Recv(wait)
	if err != nil {
		t.Fatalf("recv add: %v", err)
	}
	t.Cleanup(r.Close)
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("AddWorkload: %v", err)
	}
	return r
}

func delAcked(t testing.TB, s *zds.Server, uid string, clients ...*zdstest.Client) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.DelWorkload(context.Background(), uid) }()
	for i, c := range clients {
		r, err := c.Recv(wait)
		if err != nil {
			t.Fatalf("client %d: recv del: %v", i, err)
		}
		if r.Kind != zdstest.Del || r.UID != uid {
			t.Fatalf("client %d got %s, want del %s", i, r, uid)
		}
		if err := c.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("DelWorkload: %v", err)
	}
}

func waitConns(t testing.TB, s *zds.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for s.Connections() != n {
		if time.Now().After(deadline) {
			t.Fatalf("server has %d connections, want %d", s.Connections(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHelloThenEmptySnapshot(t *testing.T) {
	s := startServer(t, zds.Config{})
	_, snap := connect(t, s)
	if len(snap) != 0 {
		t.Fatalf("snapshot of an empty registry: %v", snap)
	}
	waitConns(t, s, 1)
}

func TestSocketFile(t *testing.T) {
	privtest.RequireRoot(t)
	path := socketPath(t)
	// A stale socket file (a crashed agent) is replaced.
	stale, err := zds.Listen(zds.Config{SocketPath: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unlink(path); err != nil { // keep the file, lose the listener
		t.Fatal(err)
	}
	if err := unix.Mknod(path, unix.S_IFSOCK|0o666, 0); err != nil {
		t.Fatal(err)
	}
	_ = stale.Close()
	s := startServer(t, zds.Config{SocketPath: path})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	connect(t, s)

	// A socket something answers on (another meshlet given the same
	// path) is never taken over.
	if _, err := zds.Listen(zds.Config{SocketPath: path}); !errors.Is(err, unixsock.ErrInUse) {
		t.Fatalf("Listen on a served socket: %v, want ErrInUse", err)
	}
	connect(t, s)

	// Anything but a socket is never removed.
	plain := filepath.Join(filepath.Dir(path), "plain")
	if err := os.WriteFile(plain, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := zds.Listen(zds.Config{SocketPath: plain}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep me" {
		t.Fatalf("regular file was modified")
	}
}

func TestBadHelloClosesConnection(t *testing.T) {
	s := startServer(t, zds.Config{HelloTimeout: 300 * time.Millisecond})
	cases := map[string]func(*zdstest.Client) error{
		"no hello":  func(*zdstest.Client) error { return nil },
		"version 0": func(c *zdstest.Client) error { return c.SendRaw(mustMarshal(t, &zdspb.ZdsHello{})) },
		"garbage":   func(c *zdstest.Client) error { return c.SendRaw([]byte{0xff, 0xff, 0xff}) },
		"hello with fd": func(c *zdstest.Client) error {
			return c.SendRaw(mustMarshal(t, &zdspb.ZdsHello{Version: zdspb.Version_V1}), 0)
		},
	}
	for name, send := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := zdstest.DialRaw(s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := send(c); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitClosed(wait); err != nil {
				t.Fatal(err)
			}
		})
	}
	// The server still works.
	connect(t, s)
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAddCarriesNetnsFdAndWorkloadInfo(t *testing.T) {
	s := startServer(t, zds.Config{})
	c, _ := connect(t, s)
	w := workload(t, "u1")
	r := addAcked(t, s, c, w)
	if r.Kind != zdstest.Add || r.UID != "u1" {
		t.Fatalf("got %s", r)
	}
	if r.NetnsInode != w.Netns.Inode() {
		t.Fatalf("fd's netns inode %d, want %d", r.NetnsInode, w.Netns.Inode())
	}
	want := &zdspb.WorkloadInfo{Name: "pod-u1", Namespace: "ns-u1", ServiceAccount: "sa-u1"}
	if !proto.Equal(r.Info, want) {
		t.Fatalf("workload info %v, want %v", r.Info, want)
	}
}

func TestAddWithoutZtunnel(t *testing.T) {
	s := startServer(t, zds.Config{})
	err := s.AddWorkload(context.Background(), workload(t, "u1"), enroll.HandoverNow)
	if !errors.Is(err, zds.ErrNoProxy) {
		t.Fatalf("AddWorkload with no ztunnel = %v, want ErrNoProxy", err)
	}
	if s.Workloads() != 0 {
		t.Fatalf("failed add left %d workloads registered", s.Workloads())
	}
	_, snap := connect(t, s)
	if len(snap) != 0 {
		t.Fatalf("failed add replayed: %v", snap)
	}
}

func TestSnapshotReplayAfterReconnect(t *testing.T) {
	s := startServer(t, zds.Config{})
	c1, _ := connect(t, s)
	const n = 20
	want := map[string]uint64{}
	for i := range n {
		w := workload(t, fmt.Sprintf("u%02d", i))
		addAcked(t, s, c1, w)
		want[w.UID] = w.Netns.Inode()
	}
	delAcked(t, s, "u00", c1)
	delete(want, "u00")
	_ = c1.Close()
	waitConns(t, s, 0)

	_, snap := connect(t, s)
	got := map[string]uint64{}
	for _, r := range snap {
		switch r.Kind {
		case zdstest.Add:
			if _, dup := got[r.UID]; dup {
				t.Errorf("duplicate add for %s", r.UID)
			}
			got[r.UID] = r.NetnsInode
		default:
			t.Errorf("unexpected %s in snapshot", r)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("replayed adds (uid → netns inode)\n got  %v\n want %v", got, want)
	}
}

func TestNackIsAnErrorAndNotRegistered(t *testing.T) {
	s := startServer(t, zds.Config{})
	c, _ := connect(t, s)
	errc := make(chan error, 1)
	go func() { errc <- s.AddWorkload(context.Background(), workload(t, "refused"), enroll.HandoverNow) }()
	r, err := c.Recv(wait)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := c.Nack("netns not usable"); err != nil {
		t.Fatal(err)
	}
	var nack *zds.NackError
	if err := <-errc; !errors.As(err, &nack) || nack.Reason != "netns not usable" || nack.UID != "refused" {
		t.Fatalf("AddWorkload = %v, want a NackError with ztunnel's reason", err)
	}
	if s.Workloads() != 0 {
		t.Fatalf("nacked workload registered")
	}
	// ztunnel retries a refused Add by itself until told to forget it.
	r, err = c.Recv(wait)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != zdstest.Del || r.UID != "refused" {
		t.Fatalf("after the NACK ztunnel got %s, want del refused", r)
	}
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}
	// The connection is still in sync and usable.
	addAcked(t, s, c, workload(t, "next"))
}

func TestAckTimeoutClosesConnection(t *testing.T) {
	s := startServer(t, zds.Config{AckTimeout: 200 * time.Millisecond})
	c, _ := connect(t, s)
	err := s.AddWorkload(context.Background(), workload(t, "slow"), enroll.HandoverNow)
	if err == nil || !strings.Contains(err.Error(), "no ack") {
		t.Fatalf("AddWorkload without ack = %v, want a timeout", err)
	}
	if s.Workloads() != 0 {
		t.Fatalf("timed-out workload registered")
	}
	r, err := c.Recv(wait) // the add that was never acked
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := c.WaitClosed(wait); err != nil {
		t.Fatal(err)
	}
	waitConns(t, s, 0)
}

// TestAbandonedAddKeepsTheConnection: a caller whose deadline passes while
// ztunnel has not acked yet gets its error at once; the connection stays,
// the late ack is matched to the request it answers, and ztunnel is told
// to drop the workload the caller gave up on.
func TestAbandonedAddKeepsTheConnection(t *testing.T) {
	s := startServer(t, zds.Config{})
	c, _ := connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.AddWorkload(ctx, workload(t, "u"), enroll.HandoverNow); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AddWorkload past its deadline = %v, want the deadline", err)
	}
	r, err := c.Recv(wait)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if r.Kind != zdstest.Add || r.UID != "u" {
		t.Fatalf("ztunnel got %s, want add u", r)
	}
	if err := c.Ack(); err != nil { // late, but within the ack timeout
		t.Fatal(err)
	}
	r, err = c.Recv(wait)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != zdstest.Del || r.UID != "u" {
		t.Fatalf("after the abandoned Add ztunnel got %s, want del u", r)
	}
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}
	addAcked(t, s, c, workload(t, "next"))
	if s.Connections() != 1 {
		t.Fatalf("%d connections, want the one that answered late", s.Connections())
	}
}

// TestHookBehindAStalledRequestAnswersInTime: a starting pod's Add queued
// behind a request ztunnel has not answered fails when its own deadline
// passes, sends nothing, and leaves the connection to the request ahead of
// it; a Del whose caller cannot wait is sent in its turn.
func TestHookBehindAStalledRequestAnswersInTime(t *testing.T) {
	s := startServer(t, zds.Config{})
	c, _ := connect(t, s)
	waitConns(t, s, 1)
	ahead := make(chan error, 1)
	go func() { ahead <- s.AddWorkload(context.Background(), workload(t, "running"), enroll.HandoverDeferred) }()
	first, err := c.Recv(wait) // not answered until the hook has given up
	if err != nil {
		t.Fatal(err)
	}
	first.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = s.AddWorkload(ctx, workload(t, "starting"), enroll.HandoverNow)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("AddWorkload behind a stalled request = %v, want not sent, with the deadline", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	if err := s.DelWorkload(dctx, "stopping"); err != nil {
		t.Fatalf("DelWorkload behind a stalled request = %v, want it queued", err)
	}
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := <-ahead; err != nil {
		t.Fatalf("the request ahead: %v", err)
	}
	// What follows on the wire: the Dels of the pod that could not start
	// and of the stopping pod, in either order, and nothing of "starting"'s Add.
	var got []string
	for len(got) < 2 {
		r, err := c.Recv(wait)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		r.Close()
		got = append(got, r.String())
		if err := c.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(got)
	if want := []string{"del starting", "del stopping"}; !slices.Equal(got, want) {
		t.Fatalf("ztunnel got %q, want %q", got, want)
	}
}

func TestTwoConnectionsAddsToNewestDelToAll(t *testing.T) {
	s := startServer(t, zds.Config{})
	old, _ := connect(t, s)
	w1 := workload(t, "before")
	addAcked(t, s, old, w1)

	newer, snap := connect(t, s)
	if len(snap) != 1 || snap[0].UID != "before" || snap[0].NetnsInode != w1.Netns.Inode() {
		t.Fatalf("second connection's snapshot %v, want add before", snap)
	}
	waitConns(t, s, 2)
	r := addAcked(t, s, newer, workload(t, "after"))
	if r.UID != "after" {
		t.Fatalf("newest got %s", r)
	}
	delAcked(t, s, "before", old, newer)

	// The old connection got nothing else: its next request is the Del below.
	delAcked(t, s, "after", old, newer)
}

func ackOfSize(t testing.TB, size int) []byte {
	for l := 0; l < 2*size; l++ {
		b := mustMarshal(t, &zdspb.WorkloadResponse{Payload: &zdspb.WorkloadResponse_Ack{Ack: &zdspb.Ack{Error: strings.Repeat("x", l)}}})
		if len(b) == size {
			return b
		}
	}
	t.Fatalf("no ack of %d bytes", size)
	return nil
}

func TestMisbehavingPeerIsClosedOthersUnaffected(t *testing.T) {
	// Every subtest needs root: without it the test itself skips, rather
	// than passing with nothing run.
	privtest.RequireRoot(t)
	valid := mustMarshal(t, &zdspb.WorkloadResponse{Payload: &zdspb.WorkloadResponse_Ack{Ack: &zdspb.Ack{}}})
	cases := map[string][]byte{
		"garbage":                     {0x0a, 0xff, 0x01},
		"unsolicited ack":             valid,
		"truncated message":           ackOfSize(t, 40)[:37],
		"oversized datagram":          ackOfSize(t, 3000),
		"datagram of exactly 1024":    ackOfSize(t, zds.MaxMessageSize),
		"request instead of response": mustMarshal(t, &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_SnapshotSent{SnapshotSent: &zdspb.SnapshotSent{}}}),
	}
	for name, msg := range cases {
		for _, withFd := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fd=%t", name, withFd), func(t *testing.T) {
				s := startServer(t, zds.Config{})
				bystander, _ := connect(t, s)
				addAcked(t, s, bystander, workload(t, "kept"))
				victim, _ := connect(t, s)
				waitConns(t, s, 2)
				var fds []int
				if withFd {
					f, err := os.Open("/dev/null")
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					fds = append(fds, int(f.Fd()))
				}
				if err := victim.SendRaw(msg, fds...); err != nil {
					t.Fatal(err)
				}
				if err := victim.WaitClosed(wait); err != nil {
					t.Fatal(err)
				}
				waitConns(t, s, 1)
				if s.Workloads() != 1 {
					t.Fatalf("registry has %d workloads after a peer misbehaved, want 1", s.Workloads())
				}
				addAcked(t, s, bystander, workload(t, "new"))
			})
		}
	}
	// A valid ack that carries an fd is a violation too.
	t.Run("valid ack with fd", func(t *testing.T) {
		s := startServer(t, zds.Config{})
		victim, _ := connect(t, s)
		errc := make(chan error, 1)
		go func() { errc <- s.AddWorkload(context.Background(), workload(t, "u"), enroll.HandoverNow) }()
		r, err := victim.Recv(wait)
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := victim.SendRaw(valid, int(f.Fd())); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err == nil {
			t.Fatal("AddWorkload succeeded on an ack that broke the protocol")
		}
		if err := victim.WaitClosed(wait); err != nil {
			t.Fatal(err)
		}
		if s.Workloads() != 0 {
			t.Fatal("workload registered although its add failed")
		}
	})
}

func TestDelWithoutConnectionsDropsFromRegistry(t *testing.T) {
	s := startServer(t, zds.Config{})
	c, _ := connect(t, s)
	addAcked(t, s, c, workload(t, "u"))
	_ = c.Close()
	waitConns(t, s, 0)
	if err := s.DelWorkload(context.Background(), "u"); err != nil {
		t.Fatalf("DelWorkload with no ztunnel: %v", err)
	}
	_, snap := connect(t, s)
	if len(snap) != 0 {
		t.Fatalf("deleted workload replayed: %v", snap)
	}
}

func TestNoFdLeak(t *testing.T) {
	s := startServer(t, zds.Config{})
	c, _ := connect(t, s)
	var ws []*enroll.Workload
	for i := range 10 {
		ws = append(ws, workload(t, fmt.Sprint(i)))
	}
	before := openFds(t)
	for _, w := range ws {
		r := addAcked(t, s, c, w)
		r.Close()
	}
	if got := openFds(t); got != before+len(ws) {
		t.Fatalf("after %d adds: %d fds open, want %d (one dup each)", len(ws), got, before+len(ws))
	}
	for _, w := range ws {
		delAcked(t, s, w.UID, c)
	}
	if got := openFds(t); got != before {
		t.Fatalf("after dels: %d fds open, want %d", got, before)
	}
}

// openFds counts this process's open network namespace fds (the dups the
// server holds).
func openFds(t testing.TB) int {
	held, err := netnstest.HeldNetns(0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range held {
		n += c
	}
	return n
}

func TestShutdownRemovesSocket(t *testing.T) {
	privtest.RequireRoot(t)
	path := socketPath(t)
	s, err := zds.Listen(zds.Config{SocketPath: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx) }()
	c, err := zdstest.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ReadSnapshot(wait); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
	if err := c.WaitClosed(wait); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file still there after shutdown: %v", err)
	}
	_ = s.Close()
}

var _ enroll.Netns = (*netns.Handle)(nil)

// TestDelDuringReplayIsNeverFollowedByItsAdd: a workload deleted while a new
// connection's snapshot is being replayed must not reach that connection as
// an Add after (or without) its Del.
func TestDelDuringReplayIsNeverFollowedByItsAdd(t *testing.T) {
	s := startServer(t, zds.Config{})
	old := &zdstest.Ztunnel{}
	if err := old.Start(s.Addr()); err != nil {
		t.Fatal(err)
	}
	defer old.Stop()
	waitConns(t, s, 1)
	for _, uid := range []string{"w1", "w2"} {
		if err := s.AddWorkload(context.Background(), workload(t, uid), enroll.HandoverNow); err != nil {
			t.Fatal(err)
		}
	}

	joining := dial(t, s)
	first, err := joining.Recv(wait) // the replay's first Add; not acked yet
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	other := map[string]string{"w1": "w2", "w2": "w1"}[first.UID]

	delDone := make(chan error, 1)
	go func() { delDone <- s.DelWorkload(context.Background(), other) }()
	// The old connection sees the Del only after the workload was retired.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := old.WaitFor(ctx, func(rs []*zdstest.Request) bool {
		for _, r := range rs {
			if r.Kind == zdstest.Del && r.UID == other {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	if err := joining.Ack(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 2 {
		r, err := joining.Recv(wait)
		if err != nil {
			t.Fatalf("after %v: %v", seen, err)
		}
		r.Close()
		if r.Kind == zdstest.Add && r.UID == other {
			t.Fatalf("joining connection got add %s after it was deleted (seen %v)", other, seen)
		}
		seen = append(seen, string(r.Kind)+" "+r.UID)
		if err := joining.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-delDone; err != nil {
		t.Fatal(err)
	}
	got := strings.Join(seen, ",")
	if got != "del "+other+",snapshot_sent " && got != "snapshot_sent ,del "+other {
		t.Fatalf("joining connection got %q, want the Del and SnapshotSent only", got)
	}
}

func TestDeferredAddWithoutZtunnel(t *testing.T) {
	s := startServer(t, zds.Config{})
	w := workload(t, "running")
	if err := s.AddWorkload(context.Background(), w, enroll.HandoverDeferred); err != nil {
		t.Fatalf("deferred AddWorkload with no ztunnel: %v", err)
	}
	if s.Workloads() != 1 {
		t.Fatalf("deferred workload not registered")
	}
	_, snap := connect(t, s)
	if len(snap) != 1 || snap[0].Kind != zdstest.Add || snap[0].NetnsInode != w.Netns.Inode() {
		t.Fatalf("snapshot %v, want the deferred workload with its netns", snap)
	}
}

// TestDeferredAddWhoseConnectionDies: a running pod's Add (deferred
// handover) to a ztunnel that goes away before acking it is kept for the
// next connection, as with no ztunnel at all; a starting pod's would fail.
func TestDeferredAddWhoseConnectionDies(t *testing.T) {
	s := startServer(t, zds.Config{})
	c, _ := connect(t, s)
	waitConns(t, s, 1)
	go func() {
		if r, err := c.Recv(wait); err == nil {
			r.Close()
		}
		_ = c.Close() // gone without an ack
	}()
	w := workload(t, "running")
	if err := s.AddWorkload(context.Background(), w, enroll.HandoverDeferred); err != nil {
		t.Fatalf("deferred AddWorkload whose connection closed: %v", err)
	}
	if s.Workloads() != 1 {
		t.Fatal("the deferred workload was dropped with the connection")
	}
	waitConns(t, s, 0)
	_, snap := connect(t, s)
	if len(snap) != 1 || snap[0].Kind != zdstest.Add || snap[0].NetnsInode != w.Netns.Inode() {
		t.Fatalf("snapshot %v, want the deferred workload with its netns", snap)
	}
}
