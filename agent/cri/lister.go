package cri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultEndpoints are the CRI sockets tried, in order, when --cri-socket
// is not set: containerd's, then CRI-O's.
var DefaultEndpoints = []string{"/run/containerd/containerd.sock", "/var/run/crio/crio.sock"}

// ListTimeout bounds one dial of the runtime and one listing of its pods.
const ListTimeout = 30 * time.Second

// maxMsgSize matches the kubelet's CRI client: a node with many pods
// answers ListPodSandbox with more than gRPC's default 4 MiB.
const maxMsgSize = 16 << 20

// Lister reads the running pods from a CRI runtime. It is safe for
// concurrent use.
type Lister struct {
	endpoint string
	conn     *grpc.ClientConn
	client   runtimeapi.RuntimeServiceClient
	name     string
	version  string
}

// Dial connects to the CRI runtime at endpoint (a socket path, or
// unix:///path) and calls Version once to prove it answers. ctx bounds the
// connection and that call.
func Dial(ctx context.Context, endpoint string) (*Lister, error) {
	path, err := socketPath(endpoint)
	if err != nil {
		return nil, err
	}
	// passthrough and our own dialer: the path reaches net.Dial as is,
	// never parsed as a URL (a path with '%' or '?' would be mangled).
	conn, err := grpc.NewClient("passthrough:///cri",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}),
		grpc.WithAuthority("localhost"),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %s: %w", endpoint, err)
	}
	l := &Lister{endpoint: endpoint, conn: conn, client: runtimeapi.NewRuntimeServiceClient(conn)}
	// The connection is lazy: without this call a wrong socket would only
	// show at the first list.
	v, err := l.client.Version(ctx, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("CRI runtime at %s does not answer: %w", endpoint, err)
	}
	l.name, l.version = v.GetRuntimeName(), v.GetRuntimeVersion()
	return l, nil
}

// socketPath accepts what --cri-socket and the kubelet's
// --container-runtime-endpoint accept on Linux: a path or unix:///path.
func socketPath(endpoint string) (string, error) {
	path := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		path = rest
	} else if strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("CRI endpoint %q: only Unix sockets are supported (a path or unix:///path)", endpoint)
	}
	if path == "" {
		return "", fmt.Errorf("CRI endpoint %q: empty socket path", endpoint)
	}
	return path, nil
}

// Endpoint is socket (--cri-socket) if its runtime answers, else, with
// socket empty, the first of DefaultEndpoints that answers; within 2s.
func Endpoint(ctx context.Context, socket string) (string, error) {
	candidates := DefaultEndpoints
	if socket != "" {
		candidates = []string{socket}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return Find(ctx, candidates)
}

// DialEndpoint dials Endpoint(ctx, socket).
func DialEndpoint(ctx context.Context, socket string) (Listing, error) {
	endpoint, err := Endpoint(ctx, socket)
	if err != nil {
		return nil, err
	}
	l, err := Dial(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Find returns the first of candidates (DefaultEndpoints for an unset
// --cri-socket) whose runtime answers. ctx bounds the whole search.
func Find(ctx context.Context, candidates []string) (endpoint string, err error) {
	if len(candidates) == 0 {
		return "", errors.New("no CRI endpoint to try")
	}
	var errs []error
	for _, c := range candidates {
		l, err := Dial(ctx, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_ = l.Close()
		return c, nil
	}
	return "", fmt.Errorf("no CRI runtime answers (tried %s): %w", strings.Join(candidates, ", "), errors.Join(errs...))
}

// Runtime returns the runtime's name and version as Version reported them
// at Dial, for logs.
func (l *Lister) Runtime() (name, version string) { return l.name, l.version }

// Close closes the connection.
func (l *Lister) Close() error { return l.conn.Close() }
