package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestShutdownFollowsTheOrder: components stop in the declared order,
// whatever the order they started in; each runs until its own turn (not
// until the root ends), and a name's closers run after its component
// returned, the last registered first.
func TestShutdownFollowsTheOrder(t *testing.T) {
	order := []string{"source", "api", "zds", "lock"}
	lc := newLifecycle(context.Background(), order)
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	// Each component, when asked to stop, checks that the components
	// after it in the order still run.
	running := map[string]bool{}
	runUntilStopped := func(name string) func(context.Context) error {
		mu.Lock()
		running[name] = true
		mu.Unlock()
		return func(ctx context.Context) error {
			<-ctx.Done()
			mu.Lock()
			for _, later := range order[slices.Index(order, name)+1:] {
				if _, started := running[later]; started && !running[later] {
					t.Errorf("%s stopped before %s", later, name)
				}
			}
			running[name] = false
			mu.Unlock()
			record("stop " + name)
			return nil
		}
	}
	lc.onStop("lock", func() { record("release lock") })
	lc.start("zds", runUntilStopped("zds"))
	lc.onStop("zds", func() { record("close zds 1") })
	lc.onStop("zds", func() { record("close zds 2") })
	lc.start("api", runUntilStopped("api"))
	lc.start("source", runUntilStopped("source"))

	lc.stop()
	want := []string{"stop source", "stop api", "stop zds", "close zds 2", "close zds 1", "release lock"}
	if !slices.Equal(events, want) {
		t.Fatalf("shutdown ran %q, want %q", events, want)
	}
	if lc.root.Err() == nil {
		t.Fatal("the root context is still live after stop")
	}
	lc.stop() // a second stop does nothing
	if len(events) != len(want) {
		t.Fatalf("a second stop ran %q", events[len(want):])
	}
	late := false
	lc.onStop("lock", func() { late = true })
	if !late {
		t.Fatal("a stop added after shutdown was not run at once")
	}
}

// TestAFailingComponentCancelsTheRoot: a component that fails, or returns
// while it should run, ends the root with its name in the cause; the
// others keep running until their turn to stop.
func TestAFailingComponentCancelsTheRoot(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"fails", errors.New("socket gone"), "zds: socket gone"},
		{"returns", nil, "zds stopped unexpectedly"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lc := newLifecycle(context.Background(), []string{"api", "zds"})
			apiCtx := make(chan context.Context, 1)
			lc.start("api", func(ctx context.Context) error { apiCtx <- ctx; <-ctx.Done(); return nil })
			lc.start("zds", func(context.Context) error { return c.err })
			select {
			case <-lc.root.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the root was not cancelled")
			}
			if cause := context.Cause(lc.root); cause == nil || !strings.Contains(cause.Error(), c.want) {
				t.Fatalf("cause %v, want %q", cause, c.want)
			}
			if ctx := <-apiCtx; ctx.Err() != nil {
				t.Fatal("another component was stopped with the root, not at its turn")
			}
			lc.stop()
		})
	}
}

// TestLifecycleRefusesUnknownNames: every component of the daemon is in
// the shutdown order, once.
func TestLifecycleRefusesUnknownNames(t *testing.T) {
	for i, name := range shutdownOrder {
		if slices.Index(shutdownOrder, name) != i {
			t.Fatalf("%q twice in the shutdown order", name)
		}
	}
	lc := newLifecycle(context.Background(), shutdownOrder)
	defer lc.stop()
	for name, add := range map[string]func(){
		"not in the order": func() { lc.onStop("cache", func() {}) },
		"started twice": func() {
			lc.start("retries", func(ctx context.Context) error { <-ctx.Done(); return nil })
			lc.start("retries", func(ctx context.Context) error { <-ctx.Done(); return nil })
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			add()
		}()
	}
}
