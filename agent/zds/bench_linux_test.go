package zds_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
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

// BenchmarkReplay1000: a ztunnel (re)connects to a meshlet with 1,000
// enrolled pods and receives them all (an Add with a netns fd each, each
// acked) up to SnapshotSent, over the real socket. The pods share one
// network namespace (creating 1,000 is setup, not replay); every Add
// still carries an fd of its own. Reports the seconds a whole replay
// takes.
func BenchmarkReplay1000(b *testing.B) {
	const pods = 1000
	s := startServer(b, zds.Config{})
	ns := netnstest.Open(b)
	ctx := context.Background()
	for i := range pods {
		uid := fmt.Sprintf("pod-%d", i)
		w := &enroll.Workload{Record: enroll.Record{UID: uid, Name: uid, Namespace: "bench", ServiceAccount: "default", NetnsInode: ns.Inode()}, Netns: ns}
		if err := s.AddWorkload(ctx, w, enroll.HandoverDeferred); err != nil {
			b.Fatal(err)
		}
	}
	var total time.Duration
	for b.Loop() {
		start := time.Now()
		c, err := zdstest.Dial(s.Addr())
		if err != nil {
			b.Fatal(err)
		}
		snap, err := c.ReadSnapshot(10 * time.Second)
		total += time.Since(start)
		for _, r := range snap {
			r.Close()
		}
		_ = c.Close()
		if err != nil {
			b.Fatal(err)
		}
		if len(snap) != pods {
			b.Fatalf("snapshot of %d pods, want %d", len(snap), pods)
		}
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/replay")
}
