package kube

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// draResources are what meshlet's DRA driver uses of resource.k8s.io/v1.
var draResources = []string{"deviceclasses", "resourceclaims", "resourceslices"}

// draMinor is the first Kubernetes 1.x release whose DeviceClass has
// extendedResourceName, which lets pods ask for the mesh by extended
// resource (DRAExtendedResource, GA in 1.37).
const draMinor = 37

// ServesDRA asks the API server's discovery whether it serves the
// resource.k8s.io/v1 resources meshlet's DRA driver uses, in a release
// whose DeviceClass has extendedResourceName (1.37). No, with why: the
// group version is not served (a cluster older than 1.34, or one that
// turned it off), lacks one of them, or the release is older. An API
// server that does not answer within wait is an error: the caller
// decides.
func ServesDRA(ctx context.Context, client kubernetes.Interface, wait time.Duration) (served bool, why string, err error) {
	gv := resourcev1.SchemeGroupVersion.String()
	deadline := time.Now().Add(wait)
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		served, why, err = servesDRA(client, gv)
		if err == nil {
			return served, why, nil
		}
		if time.Now().Add(backoff).After(deadline) {
			return false, "", err
		}
		select {
		case <-ctx.Done():
			return false, "", fmt.Errorf("discovery of %s: %w", gv, context.Cause(ctx))
		case <-time.After(backoff):
		}
	}
}

func servesDRA(client kubernetes.Interface, gv string) (bool, string, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		return false, gv + " is not served", nil
	case err != nil:
		return false, "", fmt.Errorf("discovery of %s: %w", gv, err)
	}
	for _, want := range draResources {
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == want }) {
			return false, gv + " has no " + want, nil
		}
	}
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		return false, "", fmt.Errorf("server version: %w", err)
	}
	// A version that does not parse (a build without it stamped) says nothing.
	if major, minor := leadingInt(v.Major), leadingInt(v.Minor); major == 1 && minor >= 0 && minor < draMinor {
		return false, fmt.Sprintf("Kubernetes %s is older than 1.%d (the DeviceClass's extendedResourceName)", v.GitVersion, draMinor), nil
	}
	return true, "", nil
}

// leadingInt is the number s starts with ("37+" is 37), -1 without one.
func leadingInt(s string) int {
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(s)
	}
	n, err := strconv.Atoi(s[:end])
	if err != nil {
		return -1
	}
	return n
}
