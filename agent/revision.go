package agent

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
)

// defaultPolicy is Istio's selection, every revision's pods.
func defaultPolicy() policy.Config {
	p := policy.Defaults()
	p.RevisionlessPods = policy.RevisionlessDefaultTag
	return p
}

// validateRevision checks --revision and what it cannot run with.
func (c *Config) validateRevision() error {
	rev := c.Policy.Revision
	if rev == "" {
		if c.Policy.RevisionlessPods != policy.RevisionlessDefaultTag {
			return fmt.Errorf("--revisionless-pods=%s needs --revision", c.Policy.RevisionlessPods)
		}
		return nil
	}
	if errs := validation.IsDNS1123Label(rev); len(errs) > 0 {
		return fmt.Errorf("--revision=%q is not a revision name: %s", rev, strings.Join(errs, "; "))
	}
	if len(rev) > redirect.MaxInstanceLen {
		return fmt.Errorf("--revision=%q: at most %d characters (it names the node's rules of this meshlet)", rev, redirect.MaxInstanceLen)
	}
	switch {
	case c.Standalone:
		return errors.New("--revision needs the API server (namespaces' labels, Istio's revision tags): drop --standalone")
	case c.Mode == ModeCNI:
		return errors.New("--revision needs NRI (--mode=nri or auto): in CNI mode one meshlet-cni in the runtime's chain serves the node")
	case c.DRA.Enabled:
		return errors.New("--revision needs --dra=false: the DRA plugin publishes the node's one mesh device, for one meshlet per node")
	}
	return nil
}
