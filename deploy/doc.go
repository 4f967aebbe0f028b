// Package deploy holds meshlet's Kubernetes manifests (*.yaml) and runtime
// configuration (runtime/). It has no Go code: its tests check the
// manifests against a real kube-apiserver.
package deploy
