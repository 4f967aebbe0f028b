module github.com/meshlet/meshlet

go 1.26.0

require (
	github.com/go-logr/logr v1.4.1
	golang.org/x/sys v0.50.0
	google.golang.org/protobuf v1.36.12
	k8s.io/klog/v2 v2.140.0
)
