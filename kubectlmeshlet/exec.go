package kubectlmeshlet

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// execResult is what a command run in a container printed, and its exit
// status.
type execResult struct {
	Stdout, Stderr []byte
	// ExitCode is the command's exit status (0 when it succeeded).
	ExitCode int
}

// podExec runs commands in pods' containers through the API server's
// pods/exec, as kubectl exec does.
type podExec interface {
	Exec(ctx context.Context, namespace, pod, container string, command []string) (execResult, error)
}

// apiExec is podExec through a real API server: the WebSocket protocol
// first, then SPDY for API servers (or proxies) that refuse the upgrade,
// as kubectl does.
type apiExec struct {
	config *rest.Config
	client kubernetes.Interface
}

// Exec runs command and returns its output. A command that ran and exited
// non-zero is a result, not an error: err is only for an exec that could
// not run it (no such pod, the kubelet unreachable, ...).
func (e apiExec) Exec(ctx context.Context, namespace, pod, container string, command []string) (execResult, error) {
	req := e.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(e.config, "POST", req.URL())
	if err != nil {
		return execResult{}, fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
	}
	websocket, err := remotecommand.NewWebSocketExecutor(e.config, "GET", req.URL().String())
	if err != nil {
		return execResult{}, fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
	}
	executor, err := remotecommand.NewFallbackExecutor(websocket, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return execResult{}, fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
	}
	var stdout, stderr bytes.Buffer
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	res := execResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exit utilexec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		res.ExitCode = exit.ExitStatus()
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("exec in %s/%s container %s: %w", namespace, pod, container, err)
	}
	return res, nil
}
