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

// errRetired: the workload was deleted before its Add could be sent.
var errRetired = errors.New("workload deleted before it was sent")

// conn is one ztunnel connection. Requests are serialised (acks carry no
// id); a reader goroutine delivers each ack to the waiting request and
// closes the connection on anything else.
type conn struct {
	uc         *net.UnixConn
	id         uint64
	ackTimeout time.Duration
	log        logr.Logger

	reqMu sync.Mutex // held for a request's send and ack wait

	mu      sync.Mutex
	waiting chan *zdspb.Ack // set while a request awaits its ack
	err     error           // why the connection closed
	done    chan struct{}   // closed with the connection
}

func newConn(uc *net.UnixConn, id uint64, ackTimeout time.Duration, log logr.Logger) *conn {
	return &conn{uc: uc, id: id, ackTimeout: ackTimeout, log: log.WithValues("conn", id), done: make(chan struct{})}
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
	return c.request(ctx, &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Add{Add: &zdspb.AddWorkload{Uid: w.uid, WorkloadInfo: w.info}}}, "add", w.uid, w)
}

// request sends req (with fdOf's fd, if set) and waits for its ack. A
// timeout or cancellation closes the connection: the next ack could not be
// matched to its request any more.
func (c *conn) request(ctx context.Context, req *zdspb.WorkloadRequest, kind, uid string, fdOf *workload) error {
	c.reqMu.Lock()
	defer c.reqMu.Unlock()
	select {
	case <-c.done:
		return fmt.Errorf("%w: %v", errConnClosed, c.cause())
	default:
	}
	ch := make(chan *zdspb.Ack, 1)
	c.mu.Lock()
	c.waiting = ch
	c.mu.Unlock()

	deadline := time.Now().Add(c.ackTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.write(req, fdOf, deadline); err != nil {
		c.mu.Lock()
		c.waiting = nil
		c.mu.Unlock()
		if errors.Is(err, errRetired) {
			return err
		}
		c.close(fmt.Errorf("write %s: %w", kind, err))
		return fmt.Errorf("send %s: %w", kind, err)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case ack := <-ch:
		if ack.GetError() != "" {
			return &NackError{Request: kind, UID: uid, Reason: ack.GetError()}
		}
		return nil
	case <-timer.C:
		err := fmt.Errorf("no ack for %s within %v", kind, c.ackTimeout)
		// The connection's cause (logged when it goes) names the pod whose
		// request stalled; the caller's error does not repeat it.
		c.close(fmt.Errorf("no ack for %s of pod %s within %v", kind, uid, c.ackTimeout))
		return err
	case <-ctx.Done():
		err := fmt.Errorf("%s abandoned while waiting for ack: %w", kind, context.Cause(ctx))
		c.close(fmt.Errorf("%s of pod %s abandoned while waiting for ack: %w", kind, uid, context.Cause(ctx)))
		return err
	case <-c.done:
		return fmt.Errorf("%w while waiting for ack to %s: %v", errConnClosed, kind, c.cause())
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
