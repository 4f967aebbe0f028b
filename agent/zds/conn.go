package zds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/meshlet/meshlet/agent/zds/zdspb"
)

// errRetired: the request is no longer wanted (its workload was deleted,
// or replaced, before it could be sent), so it was not sent.
var errRetired = errors.New("workload changed before the request was sent")

// errNoTurn: the caller's deadline passed while an earlier request on the
// connection awaited its ack; nothing was sent.
var errNoTurn = errors.New("not sent: the connection's previous request was still unanswered")

// conn is one ztunnel connection. Requests are serialised (acks carry no
// id); a reader goroutine delivers each ack to the waiting request and
// closes the connection on anything else.
type conn struct {
	uc         *net.UnixConn
	id         uint64
	ackTimeout time.Duration
	log        logr.Logger

	// turn is the connection's one request slot, held from a request's
	// send until its ack. A channel rather than a mutex: a caller waits
	// for its turn only until its own deadline (a runtime hook must
	// answer in time even behind a request ztunnel is slow to ack).
	turn chan struct{}

	mu      sync.Mutex
	waiting chan *zdspb.Ack // set while a request awaits its ack
	// added are the workloads whose Add went out on this connection (the
	// snapshot needs no Keep for them).
	added map[string]*workload
	err   error         // why the connection closed
	done  chan struct{} // closed with the connection
}

// outgoing is one request to send.
type outgoing struct {
	req  *zdspb.WorkloadRequest
	kind string
	uid  string
	// fdOf, for an Add, is the workload whose netns fd goes with it: a
	// workload retired before the write is not sent (errRetired).
	fdOf *workload
	// wanted, if set, is asked right before the write, in the request's
	// turn: false means the request is no longer wanted (errRetired). A
	// request that changes after the check is ordered after this one.
	wanted func() bool
}

func newConn(uc *net.UnixConn, id uint64, ackTimeout time.Duration, log logr.Logger) *conn {
	return &conn{uc: uc, id: id, ackTimeout: ackTimeout, log: log.WithValues("conn", id),
		turn: make(chan struct{}, 1), added: map[string]*workload{}, done: make(chan struct{})}
}

// close closes the connection once, recording why.
func (c *conn) close(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return
	default:
	}
	c.err = cause
	close(c.done)
	_ = c.uc.Close()
}

func (c *conn) cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *conn) readHello(timeout time.Duration) error {
	if err := c.uc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	var hello zdspb.ZdsHello
	fds, err := ReadMessage(c.uc, &hello)
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	if len(fds) > 0 {
		closeAll(fds)
		return protocolErrorf("hello carried %d fds", len(fds))
	}
	if hello.GetVersion() != zdspb.Version_V1 {
		return protocolErrorf("hello version %v, want V1", hello.GetVersion())
	}
	return c.uc.SetReadDeadline(time.Time{})
}

// readLoop reads acks until the connection closes. ztunnel only ever
// answers requests, so anything else closes the connection.
func (c *conn) readLoop() {
	for {
		var resp zdspb.WorkloadResponse
		fds, err := ReadMessage(c.uc, &resp)
		if err != nil {
			var pe *ProtocolError
			if errors.As(err, &pe) {
				c.log.Info("Closing ztunnel connection: protocol error", "reason", pe.Reason)
			}
			c.close(err)
			return
		}
		if len(fds) > 0 {
			closeAll(fds)
			c.protocolViolation("response carried %d fds", len(fds))
			return
		}
		ack := resp.GetAck()
		if ack == nil {
			c.protocolViolation("response without an ack")
			return
		}
		c.mu.Lock()
		ch := c.waiting
		c.waiting = nil
		c.mu.Unlock()
		if ch == nil {
			c.protocolViolation("ack with no request outstanding")
			return
		}
		ch <- ack
	}
}

func (c *conn) protocolViolation(format string, args ...any) {
	err := protocolErrorf(format, args...)
	c.log.Info("Closing ztunnel connection: protocol error", "reason", err.(*ProtocolError).Reason)
	c.close(err)
}

// send sends w as Add with its fd; errRetired if w was deleted before the
// send.
func (c *conn) send(ctx context.Context, w *workload) error {
	return c.request(ctx, outgoing{req: &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Add{Add: &zdspb.AddWorkload{Uid: w.uid, WorkloadInfo: w.info}}},
		kind: "add", uid: w.uid, fdOf: w})
}

// request sends o and waits for its ack.
//
// The wait for the connection's turn and for the ack end with the
// caller's deadline. A caller that gives up waiting for its turn changes
// nothing. One that gives up after its request went out leaves the
// connection as it is: the ack is awaited in the background, holding the
// turn, until the ack timeout. Only a ztunnel that does not answer within
// the ack timeout has its connection closed (the next ack could no longer
// be matched to its request).
func (c *conn) request(ctx context.Context, o outgoing) error {
	select {
	case c.turn <- struct{}{}:
	case <-c.done:
		return fmt.Errorf("%w: %v", errConnClosed, c.cause())
	case <-ctx.Done():
		return fmt.Errorf("%s %w: %w", o.kind, errNoTurn, context.Cause(ctx))
	}
	inTurn := true
	defer func() {
		if inTurn {
			<-c.turn
		}
	}()
	select {
	case <-c.done:
		return fmt.Errorf("%w: %v", errConnClosed, c.cause())
	default:
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s not sent: %w", o.kind, context.Cause(ctx))
	}
	if o.wanted != nil && !o.wanted() {
		return errRetired
	}
	ch := make(chan *zdspb.Ack, 1)
	c.mu.Lock()
	c.waiting = ch
	c.mu.Unlock()

	ackBy := time.Now().Add(c.ackTimeout)
	writeBy := ackBy
	if d, ok := ctx.Deadline(); ok && d.Before(writeBy) {
		writeBy = d
	}
	if err := c.write(o.req, o.fdOf, writeBy); err != nil {
		c.mu.Lock()
		c.waiting = nil
		c.mu.Unlock()
		if errors.Is(err, errRetired) {
			return err
		}
		c.close(fmt.Errorf("write %s: %w", o.kind, err))
		return fmt.Errorf("send %s: %w", o.kind, err)
	}
	if o.fdOf != nil {
		c.mu.Lock()
		c.added[o.uid] = o.fdOf
		c.mu.Unlock()
	}
	timer := time.NewTimer(time.Until(ackBy))
	select {
	case ack := <-ch:
		timer.Stop()
		if ack.GetError() != "" {
			return &NackError{Request: o.kind, UID: o.uid, Reason: ack.GetError()}
		}
		return nil
	case <-timer.C:
		// The connection's cause (logged when it goes) names the pod whose
		// request stalled; the caller's error does not repeat it.
		c.close(fmt.Errorf("no ack for %s of pod %s within %v", o.kind, o.uid, c.ackTimeout))
		return fmt.Errorf("no ack for %s within %v", o.kind, c.ackTimeout)
	case <-ctx.Done():
		inTurn = false
		go c.awaitAbandoned(ch, timer, o)
		return fmt.Errorf("%s abandoned while waiting for ack: %w", o.kind, context.Cause(ctx))
	case <-c.done:
		timer.Stop()
		return fmt.Errorf("%w while waiting for ack to %s: %v", errConnClosed, o.kind, c.cause())
	}
}

// sentAdd reports whether w's Add went out on this connection.
func (c *conn) sentAdd(w *workload) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.added[w.uid] == w
}

// awaitAbandoned waits, holding the connection's turn, for the ack of a
// request whose caller gave up, and closes the connection if it does not
// come within the ack timeout.
func (c *conn) awaitAbandoned(ch chan *zdspb.Ack, timer *time.Timer, o outgoing) {
	defer func() { <-c.turn }()
	defer timer.Stop()
	select {
	case ack := <-ch:
		c.log.V(2).Info("ztunnel answered a request its caller had given up on", "request", o.kind, "podUID", o.uid, "nack", ack.GetError())
	case <-timer.C:
		c.close(fmt.Errorf("no ack for %s of pod %s within %v", o.kind, o.uid, c.ackTimeout))
	case <-c.done:
	}
}

func (c *conn) write(req *zdspb.WorkloadRequest, fdOf *workload, deadline time.Time) error {
	if err := c.uc.SetWriteDeadline(deadline); err != nil {
		return err
	}
	if fdOf == nil {
		return WriteMessage(c.uc, req, -1)
	}
	fdOf.mu.RLock()
	defer fdOf.mu.RUnlock()
	if fdOf.retired {
		return errRetired
	}
	return WriteMessage(c.uc, req, fdOf.fd)
}
