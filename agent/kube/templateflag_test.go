package kube_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet/meshlet/agent/kube"
)

func TestTemplateFlag(t *testing.T) {
	tmpl := func(c corev1.Container) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "other"}, c}}}
	}
	env := []corev1.EnvVar{{Name: "MESHLET_NODE_TAINT", Value: "from-env"}}
	for _, tc := range []struct {
		what      string
		c         corev1.Container
		want      string
		wantKnown bool
	}{
		{"unset", corev1.Container{Env: []corev1.EnvVar{{Name: "MESHLET_NODE_NAME", Value: "x"}}}, "", true},
		{"from a ConfigMap: not known", corev1.Container{Env: []corev1.EnvVar{{Name: "MESHLET_NODE_TAINT", ValueFrom: &corev1.EnvVarSource{}}}}, "", false},
		{"environment", corev1.Container{Env: env}, "from-env", true},
		{"--flag=value over the environment", corev1.Container{Args: []string{"--node-taint=from-arg"}, Env: env}, "from-arg", true},
		{"-flag value", corev1.Container{Command: []string{"meshlet", "-node-taint", "from-arg"}}, "from-arg", true},
		{"empty: off", corev1.Container{Args: []string{"--node-taint="}, Env: env}, "", true},
		{"the last argument", corev1.Container{Args: []string{"--node-taint=a", "--node-taint", "b"}}, "b", true},
		{"the last variable", corev1.Container{Env: append(env, corev1.EnvVar{Name: "MESHLET_NODE_TAINT", Value: "last"})}, "last", true},
		{"a whole environment from a ConfigMap: not known", corev1.Container{EnvFrom: []corev1.EnvFromSource{{}}}, "", false},
		{"another flag's value", corev1.Container{Args: []string{"--node-taint-x=y", "node-taint"}}, "", true},
	} {
		got, known := kube.TemplateFlag(tmpl(tc.c), "node-taint")
		if got != tc.want || known != tc.wantKnown {
			t.Errorf("%s: %q, %v; want %q, %v", tc.what, got, known, tc.want, tc.wantKnown)
		}
	}
}
