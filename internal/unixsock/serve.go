package unixsock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
)

// ServeRoot accepts connections on ln until ctx ends and runs serve for
// each whose peer is root (PeerIsRoot), at most max at once (more wait);
// other peers are closed unanswered and passed to refused. It closes ln
// when ctx ends and returns once the connections in flight are served;
// an accept error other than that close is returned.
func ServeRoot(ctx context.Context, ln *net.UnixListener, max int, refused func(error), serve func(*net.UnixConn)) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	sem := make(chan struct{}, max)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		if err := PeerIsRoot(conn); err != nil {
			refused(err)
			conn.Close()
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			conn.Close()
			return nil
		}
		wg.Go(func() {
			defer func() { <-sem }()
			defer conn.Close()
			serve(conn)
		})
	}
}
