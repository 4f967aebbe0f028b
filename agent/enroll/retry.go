package enroll

import (
	"context"
	"errors"
	"time"
)

// A running pod whose convergence failed (a rule rewrite the kernel
// refused, its namespace briefly unreadable, its source unreachable) is
// converged again by RunRetries, with backoff, until it succeeds or the
// pod goes. Nothing else would: NRI sends no event for a pod that runs,
// and the watchers only for a change. The pod keeps what it had meanwhile
// (its rules, its place at the proxy): a failure never takes a running
// pod out of the mesh. A starting pod's failure is not retried here: the
// runtime refuses its sandbox, and the kubelet creates it again.
const (
	// RetryMin is the first retry's delay; it doubles up to RetryMax.
	RetryMin = time.Second
	RetryMax = 30 * time.Second
	// retryTimeout bounds one retry's waits (the proxy, the rules).
	retryTimeout = 30 * time.Second
	// retryLockWait bounds a retry's wait for the pod's lock; a retry
	// that does not get it is put off by retryBusy.
	retryLockWait = 2 * time.Second
	retryBusy     = 5 * time.Second
)

// RetryObserver is told of every failed convergence of a running pod:
// attempt counts the failures in a row, next is when the core tries again.
type RetryObserver func(pod PodRef, attempt int, next time.Duration, err error)

// retryState is a slot's pending retry. The slot's lock guards it.
type retryState struct {
	attempts int
	at       time.Time
	lastErr  string
}

// noted records the outcome of a convergence of s (locked) made for h: a
// success clears the pod's retry, a running pod's failure schedules the
// next.
func (c *Core) noted(ctx context.Context, s *slot, h Handover, err error) {
	if err == nil {
		if s.retry.attempts > 0 {
			podLogger(ctx, &s.pod).Info("Running pod converged after failed attempts", "attempts", s.retry.attempts)
			c.clearRetry(s)
			c.publish(s)
		}
		return
	}
	if h != HandoverDeferred || errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return // a starting pod's, or the agent is stopping
	}
	delay := RetryMax
	if s.retry.attempts < 5 {
		delay = min(RetryMin<<s.retry.attempts, RetryMax)
	}
	s.retry.attempts++
	s.retry.at = c.now().Add(delay)
	s.retry.lastErr = err.Error()
	c.retryMu.Lock()
	c.retrying[s.pod.UID] = s.retry.at
	c.retryMu.Unlock()
	select {
	case c.retryWake <- struct{}{}:
	default:
	}
	c.publish(s)
	podLogger(ctx, &s.pod).Info("Converging a running pod failed; it keeps what it had, and is tried again",
		"attempt", s.retry.attempts, "retryIn", delay, "err", err)
	if c.retried != nil {
		c.retried(s.ref(), s.retry.attempts, delay, err)
	}
}

// RunRetries converges again, when their time comes, the running pods
// whose convergence failed, until ctx ends.
func (c *Core) RunRetries(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		due, next := c.dueRetries(c.now())
		c.parallel(len(due), func(i int) error {
			c.retryPod(ctx, due[i])
			return nil
		})
		if len(due) > 0 {
			continue // each is off the schedule or at its next time
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(c.now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-c.retryWake:
		case <-timer.C:
		}
	}
}

// clearRetry takes s (locked) off the retry schedule.
func (c *Core) clearRetry(s *slot) {
	if s.retry.attempts == 0 {
		return
	}
	s.retry = retryState{}
	c.retryMu.Lock()
	delete(c.retrying, s.pod.UID)
	c.retryMu.Unlock()
}

// dueRetries returns the pods whose retry is due at now, and the time of
// the next one after them (zero: none).
func (c *Core) dueRetries(now time.Time) (due []string, next time.Time) {
	c.retryMu.Lock()
	defer c.retryMu.Unlock()
	for uid, at := range c.retrying {
		if !at.After(now) {
			due = append(due, uid)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return due, next
}

// retryPod converges the pod again if it still waits for a retry: a pod
// stopped, removed or converged meanwhile does not. It leaves the pod
// off the schedule or at its next time.
func (c *Core) retryPod(ctx context.Context, uid string) {
	lctx, cancel := context.WithTimeout(ctx, retryLockWait)
	s, err := c.lockSlot(lctx, uid, false)
	cancel()
	if err != nil || s == nil {
		c.retryMu.Lock()
		if s == nil && err == nil {
			delete(c.retrying, uid) // the pod is gone
		} else if ctx.Err() == nil {
			// Another operation holds the pod: tried again later (its
			// own outcome may clear or reschedule the retry meanwhile).
			c.retrying[uid] = c.now().Add(retryBusy)
		}
		c.retryMu.Unlock()
		return
	}
	defer s.unlock()
	ctx, cancel = context.WithTimeout(ctx, retryTimeout)
	defer cancel()
	if s.retry.at.After(c.now()) {
		return // rescheduled meanwhile
	}
	if s.retry.attempts == 0 || s.state == StateReleased || s.state == StateReleasing {
		c.clearRetry(s)
		c.retryMu.Lock()
		delete(c.retrying, uid)
		c.retryMu.Unlock()
		return
	}
	_, err = c.converge(ctx, s, HandoverDeferred)
	c.noted(ctx, s, HandoverDeferred, err)
}

// Retrying is how many running pods wait for a retry of their
// convergence.
func (c *Core) Retrying() int {
	c.retryMu.Lock()
	defer c.retryMu.Unlock()
	return len(c.retrying)
}
