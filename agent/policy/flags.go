package policy

import (
	"flag"
	"strconv"

	"github.com/meshlet/meshlet/internal/flagvalue"
)

// AddFlags registers the pod selection settings on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.Var(flagvalue.NewList(&c.ExcludedNamespaces), "excluded-namespaces", "comma-separated namespaces whose pods are never enrolled")
	fs.Var(flagvalue.NewList(&c.DeniedRuntimeHandlers), "denied-runtime-handlers", "comma-separated RuntimeClass handlers (e.g. runsc) whose pods are never enrolled: in-pod rules cannot take effect there")
	fs.StringVar(&c.DataplaneModeLabel, "dataplane-mode-label", c.DataplaneModeLabel, "pod and namespace label that selects the mesh (value ambient) or opts a pod out (none)")
	fs.StringVar(&c.Revision, "revision", c.Revision, "the Istio revision this meshlet serves: only the pods whose namespace (or, in a namespace without one, the pod itself) has label "+RevisionLabel+" naming it, or a revision tag of it, are enrolled, so that each revision's meshlet and ztunnel take their own pods on a node that runs two (each then needs its own --state-dir, --ztunnel-socket, --nri-plugin-index and ports); empty: every pod, whatever its revision")
	fs.Var(flagvalue.NewEnum(&c.RevisionlessPods, "revisionless pods", RevisionlessDefaultTag, RevisionlessEnroll, RevisionlessSkip), "revisionless-pods",
		"with --revision: whether the pods that select no revision are this revision's: default-tag (Istio's rule: when the revision tag "+strconv.Quote(DefaultTag)+" points to it, or, with no such tag, when the revision is named "+strconv.Quote(DefaultRevision)+"), enroll or skip")
}
