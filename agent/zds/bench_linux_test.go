package zds_test

import (
	"context"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/internal/latency"
)

// BenchmarkZDSAdd: one Add carrying a netns fd, and its Ack, over a real
// SEQPACKET socket to a ztunnel stand-in that checks the fd is a netns
// (as ztunnel would use it). Reports p50/p99 besides the mean.
func BenchmarkZDSAdd(b *testing.B) {
	s := startServer(b, zds.Config{})
	c := dial(b, s)
	if _, err := c.ReadSnapshot(5 * time.Second); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			r, err := c.Recv(time.Minute)
			if err != nil {
				done <- err
				return
			}
			r.Close()
			if err := c.Ack(); err != nil {
				done <- err
				return
			}
		}
	}()
	w := workload(b, "bench")
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := s.AddWorkload(ctx, w, enroll.HandoverNow); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	latency.Report(b, lat)
	_ = c.Close()
	<-done
}
