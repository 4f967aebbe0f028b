package agent

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// realParts are the core and the real parts realCore gave it.
type realParts struct {
	core   *enroll.Core
	server *zds.Server
	// node is the namespace standing for the node (probe SNAT).
	node   *netns.Handle
	redir  *redirect.Redirector
	policy *policy.Policy
}

// realCore assembles the core as the daemon does, with real parts and no
// runtime: a ZDS server serving on a socket of the test's own, nftables
// redirection whose node side lives in a namespace of the test's own
// (never the real node's tables), the netns opener and Istio's default
// policy in standalone mode. Everything goes when tb ends; the ZDS server
// stops with ctx or then, whichever comes first.
func realCore(ctx context.Context, tb testing.TB) realParts {
	tb.Helper()
	return realCoreWith(ctx, tb, redirect.DefaultConfig().IPv6)
}

// realCoreWith is realCore with the redirector's IPv6 setting and a
// previous agent's checkpointed records.
func realCoreWith(ctx context.Context, tb testing.TB, ipv6 bool, checkpointed ...enroll.Record) realParts {
	tb.Helper()
	privtest.RequireRoot(tb)
	ctx, cancel := context.WithCancel(ctx)
	server, err := zds.Listen(zds.Config{SocketPath: filepath.Join(zdstest.SocketDir(tb), "z.sock")})
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			tb.Error(err)
		}
		_ = server.Close()
	})
	pol, err := policy.New(policy.Defaults())
	if err != nil {
		tb.Fatal(err)
	}
	node := netnstest.Open(tb)
	rcfg := redirect.DefaultConfig()
	rcfg.HostNetnsFd = netnstest.Fd(tb, node)
	rcfg.IPv6 = ipv6
	redir, err := redirect.New(rcfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = redir.Close() })
	opener, err := netns.NewOpener(rcfg.HostNetnsFd, false)
	if err != nil {
		tb.Fatal(err)
	}
	core, err := enroll.New(enroll.Ports{Resolver: enroll.StandaloneResolver{}, Policy: pol, Settings: []enroll.SettingsSource{pol},
		Opener: opener, Redirector: redir, Proxy: server, Status: noStatus{}},
		enroll.Config{Defaults: DefaultConfig().PodDefaults, Checkpointed: checkpointed})
	if err != nil {
		tb.Fatal(err)
	}
	return realParts{core: core, server: server, node: node, redir: redir, policy: pol}
}
