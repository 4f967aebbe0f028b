package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet/meshlet/internal/flagenv"
)

// TemplateFlag is the value a pod template gives one of meshlet's flags in
// any of its containers, as the daemon reads it: an argument (--flag=value
// or --flag value) over its environment variable (MESHLET_<FLAG>); "" when
// no container gives it. known is false when a container takes it from a
// ConfigMap or a Secret (valueFrom), which the template does not say.
func TemplateFlag(t *corev1.PodTemplateSpec, flag string) (value string, known bool) {
	for _, c := range t.Spec.Containers {
		args := append(append([]string(nil), c.Command...), c.Args...)
		for i := 0; i < len(args); i++ {
			a := strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-")
			if a == args[i] {
				continue // not a flag
			}
			switch {
			case strings.HasPrefix(a, flag+"="):
				return strings.TrimPrefix(a, flag+"="), true
			case a == flag && i+1 < len(args):
				return args[i+1], true
			}
		}
		for _, e := range c.Env {
			if e.Name == flagenv.EnvName(flag) {
				return e.Value, e.ValueFrom == nil
			}
		}
	}
	return "", true
}
