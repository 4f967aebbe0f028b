// Command meshlet-cni is the chained CNI plugin of meshlet's CNI fallback,
// for runtimes without NRI: it hands each pod to the meshlet agent on the
// node and passes the pod network's result through unchanged.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/meshlet/meshlet/cnifallback/shim"
)

func main() {
	skel.PluginMainFuncs(shim.Funcs(), version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), "meshlet-cni: hands pods to the meshlet agent (chained; passes the result through)")
}
