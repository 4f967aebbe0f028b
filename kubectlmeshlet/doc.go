// Package kubectlmeshlet is the kubectl plugin kubectl-meshlet: a
// cluster-wide view of meshlet's DaemonSet. It asks each node's meshlet
// for its report (meshlet status -o json --all, run through the API
// server's pods/exec) and merges them (status); tells the versions the
// nodes run (version); checks a cluster before and after an install
// (precheck); and gathers what a bug report needs into one archive
// (bug-report). It only reads: it changes nothing in the cluster.
package kubectlmeshlet
