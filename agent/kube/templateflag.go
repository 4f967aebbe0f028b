package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet/meshlet/internal/flagenv"
)

// TemplateFlag is the value a pod template gives one of meshlet's flags in
// any of its containers, as the daemon reads it: an argument (--flag=value
// or --flag value; the last one) over its environment variable
// (MESHLET_<FLAG>; the last one); "" when no container gives it. known is
// false when the template does not say: the variable, or a container's
// whole environment (envFrom), comes from a ConfigMap or a Secret.
func TemplateFlag(t *corev1.PodTemplateSpec, flag string) (value string, known bool) {
	for _, c := range t.Spec.Containers {
		var fromArgs *string
		args := append(append([]string(nil), c.Command...), c.Args...)
		for i := 0; i < len(args); i++ {
			a := strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-")
			if a == args[i] {
				continue // not a flag
			}
			switch {
			case strings.HasPrefix(a, flag+"="):
				v := strings.TrimPrefix(a, flag+"=")
				fromArgs = &v
			case a == flag && i+1 < len(args):
				fromArgs = &args[i+1]
				i++
			}
		}
		if fromArgs != nil {
			return *fromArgs, true
		}
		var fromEnv *corev1.EnvVar
		for i, e := range c.Env {
			if e.Name == flagenv.EnvName(flag) {
				fromEnv = &c.Env[i]
			}
		}
		switch {
		case fromEnv != nil:
			return fromEnv.Value, fromEnv.ValueFrom == nil
		case len(c.EnvFrom) > 0:
			return "", false
		}
	}
	return "", true
}
