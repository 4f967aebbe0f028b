package kube

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig loads the API server configuration: the kubeconfig file when
// given, else the in-cluster service account.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig=%s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, errors.New("no API server configuration: give --kubeconfig, run in a pod (in-cluster service account), or run with --standalone")
	}
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: %w", err)
	}
	return cfg, nil
}

// NewClient returns a clientset for cfg, identified as meshlet.
func NewClient(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "meshlet"
	// The hook path never waits on the API beyond its own GET timeout; these
	// bound the background work.
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}
