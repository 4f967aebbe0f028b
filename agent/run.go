package agent

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/zds"
)

// Run runs the daemon until ctx ends. Today it serves ztunnel's ZDS socket
// with the enrollment state it holds; the runtime adapters (NRI, CNI) and
// the in-pod redirector plug in here as they land.
func Run(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	if err := cfg.Validate(); err != nil {
		return err
	}
	if _, err := policy.New(cfg.Policy); err != nil {
		return err
	}
	server, err := zds.Listen(zds.Config{SocketPath: cfg.ZtunnelSocket})
	if err != nil {
		return err
	}
	defer server.Close()
	logger.Info("meshlet started", "node", cfg.NodeName, "ztunnelSocket", server.Addr())
	if err := server.Serve(ctx); err != nil {
		return fmt.Errorf("ztunnel server: %w", err)
	}
	logger.Info("meshlet stopped", "cause", context.Cause(ctx))
	return nil
}
