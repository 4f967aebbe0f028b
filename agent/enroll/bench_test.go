package enroll

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
)

// No-op ports: BenchmarkEnrollNoop measures the core's own overhead.
type nopResolver struct{}

func (nopResolver) Resolve(context.Context, *Pod) (PodInfo, error) {
	return PodInfo{ServiceAccount: "default"}, nil
}

type nopNetns struct{ inode uint64 }

func (n nopNetns) Inode() uint64                      { return n.inode }
func (n nopNetns) Cookie() (uint64, error)            { return n.inode, nil }
func (n nopNetns) WithFd(fn func(fd int) error) error { return fn(0) }
func (n nopNetns) HoldsAddrs([]netip.Addr) error      { return nil }
func (n nopNetns) PodAddrs() ([]netip.Addr, error) {
	return []netip.Addr{netip.AddrFrom4([4]byte{10, byte(n.inode >> 16), byte(n.inode >> 8), byte(n.inode)})}, nil
}
func (n nopNetns) Close() error { return nil }

type inodeOpener struct{ inodes map[string]nopNetns }

func (o inodeOpener) Open(path string) (Netns, error) { return o.inodes[path], nil }

type nopPorts struct{}

func (nopPorts) Apply(context.Context, *Workload, *Record) (string, error) { return "", nil }
func (nopPorts) Account(*Record) (string, error)                           { return "", nil }
func (nopPorts) Remove(context.Context, *Workload, RemoveScope) error      { return nil }
func (nopPorts) AddWorkload(context.Context, *Workload, Handover) error    { return nil }
func (nopPorts) DelWorkload(context.Context, string) error                 { return nil }
func (nopPorts) ForgetInherited(context.Context, string) error             { return nil }
func (nopPorts) Report(PodRef, RedirectionStatus)                          {}

// BenchmarkEnrollNoop: Enroll of an already-enrolled pod (the common case:
// Synchronize after a restart, label watchers) with N pods enrolled. Cost
// and allocations must not grow with N.
func BenchmarkEnrollNoop(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			opener := inodeOpener{inodes: map[string]nopNetns{}}
			c, err := New(Ports{Resolver: nopResolver{}, Policy: labelPolicy{}, Settings: []SettingsSource{annotationSettings{}},
				Opener: opener, Redirector: nopPorts{}, Proxy: nopPorts{}, Status: nopPorts{}}, Config{})
			if err != nil {
				b.Fatal(err)
			}
			pods := make([]Pod, n)
			for i := range pods {
				path := fmt.Sprintf("/netns/%d", i)
				opener.inodes[path] = nopNetns{inode: uint64(i + 1)}
				pods[i] = Pod{UID: fmt.Sprintf("uid-%d", i), Name: "p", Namespace: "ns", Labels: meshOn, NetnsPath: path}
				if _, err := c.Enroll(context.Background(), pods[i]); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				res, err := c.Enroll(ctx, pods[i%n])
				if err != nil || res.Changed {
					b.Fatalf("Enroll = %+v, %v; want a no-op", res, err)
				}
				i++
			}
		})
	}
}
