// Package deploy holds meshlet's Helm chart (charts/meshlet), the
// manifests rendered from it for kubectl (*.yaml, `make manifests`),
// examples and runtime configuration (runtime/). It has no Go code: its
// tests check the manifests and the chart's renderings against a real
// kube-apiserver (internal/helmchart's tests check the chart itself).
package deploy
