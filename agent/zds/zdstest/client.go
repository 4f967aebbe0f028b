// Package zdstest is a ztunnel stand-in for tests: a ZDS client that speaks
// the same wire format as ztunnel (it is Rust, so it cannot run in Go
// tests), checks that every Add carries exactly one fd and that the fd is a
// network namespace, and acks or NACKs on demand.
package zdstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/agent/zds/zdspb"
)

// Kind is the type of a request ztunnel receives.
type Kind string

const (
	Add          Kind = "add"
	Del          Kind = "del"
	Keep         Kind = "keep"
	SnapshotSent Kind = "snapshot_sent"
)

// Request is one request as ztunnel sees it.
type Request struct {
	Kind Kind
	UID  string
	Info *zdspb.WorkloadInfo
	// Fd is the received netns fd (Add only; -1 otherwise), owned by the
	// Request: Close it.
	Fd int
	// NetnsInode identifies the namespace Fd refers to.
	NetnsInode uint64
	// At is when it was received (before the answer is sent).
	At time.Time
	// Refused is the reason the stand-in refused it with (a NACK), ""
	// for an ack (or no answer: Stall).
	Refused string
}

// Close releases the received fd.
func (r *Request) Close() {
	if r.Fd >= 0 {
		_ = unix.Close(r.Fd)
		r.Fd = -1
	}
}

func (r *Request) String() string {
	switch r.Kind {
	case Add:
		return fmt.Sprintf("%s %s (netns inode %d)", r.Kind, r.UID, r.NetnsInode)
	case SnapshotSent:
		return string(r.Kind)
	}
	return fmt.Sprintf("%s %s", r.Kind, r.UID)
}

// Client is one ztunnel connection.
type Client struct {
	uc *net.UnixConn
}

// DialRaw connects without sending the hello.
func DialRaw(path string) (*Client, error) {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	return &Client{uc: uc}, nil
}

// Dial connects and sends ZdsHello{V1}, as ztunnel does.
func Dial(path string) (*Client, error) {
	c, err := DialRaw(path)
	if err != nil {
		return nil, err
	}
	if err := c.SendHello(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// SendHello sends ZdsHello{V1}, ztunnel's first message.
func (c *Client) SendHello() error {
	if err := zds.WriteMessage(c.uc, &zdspb.ZdsHello{Version: zdspb.Version_V1}, -1); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	return nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.uc.Close() }

// Recv reads the next request. It is an error (a broken agent, from
// ztunnel's point of view) for an Add to come without exactly one netns fd,
// or for any other request to carry an fd.
func (c *Client) Recv(timeout time.Duration) (*Request, error) {
	if err := c.uc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	var req zdspb.WorkloadRequest
	fds, err := zds.ReadMessage(c.uc, &req)
	if err != nil {
		return nil, err
	}
	r := &Request{Fd: -1, At: time.Now()}
	switch p := req.Payload.(type) {
	case *zdspb.WorkloadRequest_Add:
		r.Kind, r.UID, r.Info = Add, p.Add.GetUid(), p.Add.GetWorkloadInfo()
		if r.Info == nil {
			closeFds(fds)
			return nil, fmt.Errorf("add %s without workload_info", r.UID)
		}
		if len(fds) != 1 {
			closeFds(fds)
			return nil, fmt.Errorf("add %s carried %d fds, want exactly 1", r.UID, len(fds))
		}
		inode, err := netns.Identify(fds[0])
		if err != nil {
			closeFds(fds)
			return nil, fmt.Errorf("add %s: fd is not a network namespace: %w", r.UID, err)
		}
		r.Fd, r.NetnsInode = fds[0], inode
		return r, nil
	case *zdspb.WorkloadRequest_Del:
		r.Kind, r.UID = Del, p.Del.GetUid()
	case *zdspb.WorkloadRequest_Keep:
		r.Kind, r.UID = Keep, p.Keep.GetUid()
	case *zdspb.WorkloadRequest_SnapshotSent:
		r.Kind = SnapshotSent
	default:
		closeFds(fds)
		return nil, fmt.Errorf("request with unknown payload %T", req.Payload)
	}
	if len(fds) > 0 {
		closeFds(fds)
		return nil, fmt.Errorf("%s %s carried %d fds, want none", r.Kind, r.UID, len(fds))
	}
	return r, nil
}

// Ack acknowledges the last request.
func (c *Client) Ack() error { return c.Nack("") }

// Nack refuses the last request with reason (empty reason: a plain Ack).
func (c *Client) Nack(reason string) error {
	return zds.WriteMessage(c.uc, &zdspb.WorkloadResponse{Payload: &zdspb.WorkloadResponse_Ack{Ack: &zdspb.Ack{Error: reason}}}, -1)
}

// SendRaw sends bytes as one datagram with the given fds attached: for
// tests of a misbehaving peer.
func (c *Client) SendRaw(b []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.uc.WriteMsgUnix(b, oob, nil)
	return err
}

// WaitClosed waits until the agent closes the connection; it fails if a
// request arrives instead.
func (c *Client) WaitClosed(timeout time.Duration) error {
	r, err := c.Recv(timeout)
	if err == nil {
		r.Close()
		return fmt.Errorf("connection still open: received %s", r)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("connection still open after %v", timeout)
	}
	return nil
}

// ReadSnapshot receives and acks requests up to and including SnapshotSent
// and returns those before it.
func (c *Client) ReadSnapshot(timeout time.Duration) ([]*Request, error) {
	var out []*Request
	for {
		r, err := c.Recv(timeout)
		if err != nil {
			return out, fmt.Errorf("after %d snapshot requests: %w", len(out), err)
		}
		if err := c.Ack(); err != nil {
			return out, err
		}
		if r.Kind == SnapshotSent {
			return out, nil
		}
		out = append(out, r)
	}
}

func closeFds(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// Ztunnel is an always-acking ztunnel stand-in: it connects, consumes the
// snapshot and then answers every request, recording them. Decide, if set,
// returns the NACK reason for a request ("" to ack), or Stall to leave it
// unanswered, as a hung ztunnel would.
type Ztunnel struct {
	Decide func(*Request) string
	// State, if set, is the ztunnel process this connection belongs to:
	// each request is applied to it as ztunnel does (see State), an Add
	// for a proxy that already runs in the same netns is acked whatever
	// Decide says, and a request ztunnel would take for a protocol error
	// ends the connection.
	State *State

	mu       sync.Mutex
	requests []*Request
	c        *Client
	err      error         // why serving ended; set before closed is closed
	closed   chan struct{} // closed when the connection ends
	notify   chan struct{}
	stopOnce sync.Once
}

// Start connects to path and serves in the background until Stop.
func (z *Ztunnel) Start(path string) error {
	c, err := Dial(path)
	if err != nil {
		return err
	}
	z.c, z.closed, z.notify = c, make(chan struct{}), make(chan struct{}, 1)
	go func() {
		z.err = z.serve()
		close(z.closed)
	}()
	return nil
}

// Done is closed when the connection ends (meshlet went away, or Stop).
func (z *Ztunnel) Done() <-chan struct{} { return z.closed }

func (z *Ztunnel) serve() error {
	ss := &session{names: map[string]bool{}}
	for {
		r, err := z.c.Recv(time.Hour)
		if err != nil {
			return err
		}
		reason := ""
		if z.Decide != nil {
			reason = z.Decide(r)
		}
		if z.State != nil && reason != Stall && r.Kind == Add && z.State.running(r.UID, r.NetnsInode) {
			reason = ""
		}
		if reason != "" && reason != Stall {
			r.Close()
			r.Refused = reason
		}
		z.mu.Lock()
		z.requests = append(z.requests, r)
		z.mu.Unlock()
		if reason == Stall {
			// meshlet sends nothing more before an answer: the next Recv
			// ends when it gives up and closes the connection.
			continue
		}
		if z.State != nil {
			if err := z.State.apply(ss, r, reason); err != nil {
				_ = z.c.Close() // as ztunnel drops a connection that breaks the protocol
				return fmt.Errorf("protocol error: %w", err)
			}
		}
		if err := z.c.Nack(reason); err != nil {
			return err
		}
		select {
		case z.notify <- struct{}{}:
		default:
		}
	}
}

// Stall, returned by Ztunnel.Decide, leaves a request unanswered.
const Stall = "\x00stall"

// Requests returns what was received so far.
func (z *Ztunnel) Requests() []*Request {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]*Request(nil), z.requests...)
}

// WaitFor waits until cond holds for the received requests.
func (z *Ztunnel) WaitFor(ctx context.Context, cond func([]*Request) bool) error {
	for {
		if cond(z.Requests()) {
			return nil
		}
		select {
		case <-z.notify:
		case <-z.closed:
			if cond(z.Requests()) {
				return nil
			}
			return fmt.Errorf("ztunnel stand-in stopped: %w", z.err)
		case <-ctx.Done():
			return fmt.Errorf("condition not met; received %v: %w", z.Requests(), ctx.Err())
		}
	}
}

// Stop disconnects and closes every fd received. It is idempotent.
func (z *Ztunnel) Stop() {
	z.stopOnce.Do(func() {
		_ = z.c.Close()
		<-z.closed
		z.mu.Lock()
		defer z.mu.Unlock()
		for _, r := range z.requests {
			r.Close()
		}
	})
}

// WaitSnapshot waits until the stand-in has received SnapshotSent.
func (z *Ztunnel) WaitSnapshot(ctx context.Context) error {
	return z.WaitFor(ctx, func(rs []*Request) bool { return Count(rs, SnapshotSent) > 0 })
}

// Count returns how many requests in rs are of kind k.
func Count(rs []*Request, k Kind) int {
	n := 0
	for _, r := range rs {
		if r.Kind == k {
			n++
		}
	}
	return n
}

// AddedInodes maps uid to the netns inode of every Add in rs (the last Add
// for a uid wins).
func AddedInodes(rs []*Request) map[string]uint64 {
	out := map[string]uint64{}
	for _, r := range rs {
		if r.Kind == Add {
			out[r.UID] = r.NetnsInode
		}
	}
	return out
}
