package helmchart_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/meshlet/meshlet/internal/helmchart"
)

// TestChartHardened: the defaults a hardened cluster's admission expects
// (RuntimeDefault seccomp, no privilege escalation, a read-only root with
// a scratch /tmp), and the values that adapt the chart to one: Pod
// Security labels on the namespace it creates, the quota for the critical
// priority class, a service account of one's own, an image by digest,
// another update strategy, SELinux.
func TestChartHardened(t *testing.T) {
	ds := only[*appsv1.DaemonSet](t, render(t))
	spec := ds.Spec.Template.Spec
	if psc := spec.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v, want seccompProfile RuntimeDefault", psc)
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Privileged == nil || *sc.Privileged {
			t.Errorf("container %s: securityContext %+v, want no privilege escalation, a read-only root, not privileged", c.Name, sc)
		}
	}
	if !mountsEmptyDir(ds, "/tmp") {
		t.Errorf("no emptyDir at /tmp: the root filesystem is read-only")
	}

	objs := renderValues(t, `
namespace: {create: true}
resourceQuota: {enabled: true, pods: 300}
priorityClassName: system-cluster-critical
serviceAccount: {create: false, name: node-agent}
image: {repository: registry.example.com/meshlet, tag: v1.2.3, digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
updateStrategy: {type: OnDelete}
securityContext:
  seLinuxOptions: {type: container_runtime_t}
  appArmorProfile: {type: RuntimeDefault}
`)
	ns := only[*corev1.Namespace](t, objs)
	for _, k := range []string{"enforce", "audit", "warn"} {
		if v := ns.Labels["pod-security.kubernetes.io/"+k]; v != "privileged" {
			t.Errorf("namespace label pod-security.kubernetes.io/%s=%q, want privileged", k, v)
		}
	}
	q := only[*corev1.ResourceQuota](t, objs)
	if q.Spec.Hard.Pods().Value() != 300 || q.Spec.ScopeSelector == nil || len(q.Spec.ScopeSelector.MatchExpressions) != 1 ||
		q.Spec.ScopeSelector.MatchExpressions[0].ScopeName != corev1.ResourceQuotaScopePriorityClass ||
		!slices.Equal(q.Spec.ScopeSelector.MatchExpressions[0].Values, []string{"system-cluster-critical"}) {
		t.Errorf("quota %+v, want 300 pods of the priority class system-cluster-critical", q.Spec)
	}
	for _, o := range objs {
		if _, ok := o.Obj.(*corev1.ServiceAccount); ok {
			t.Errorf("a ServiceAccount rendered with serviceAccount.create=false")
		}
	}
	ds = only[*appsv1.DaemonSet](t, objs)
	spec = ds.Spec.Template.Spec
	if spec.ServiceAccountName != "node-agent" {
		t.Errorf("serviceAccountName %q, want node-agent", spec.ServiceAccountName)
	}
	if b := only[*rbacv1.ClusterRoleBinding](t, objs); b.Subjects[0].Name != "node-agent" {
		t.Errorf("the ClusterRole is bound to %+v, want node-agent", b.Subjects)
	}
	const digest = "registry.example.com/meshlet@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if c.Image != digest {
			t.Errorf("container %s: image %s, want %s", c.Name, c.Image, digest)
		}
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Errorf("updateStrategy %+v, want OnDelete", ds.Spec.UpdateStrategy)
	}
	// The chart's former spelling, maxSurge and maxUnavailable beside type.
	ru := only[*appsv1.DaemonSet](t, render(t, "--set", "updateStrategy.maxSurge=0,updateStrategy.maxUnavailable=1")).Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("updateStrategy.maxSurge=0,maxUnavailable=1: rollingUpdate %+v, want maxSurge 0, maxUnavailable 1", ru)
	}
	sc := spec.Containers[0].SecurityContext
	if sc.SELinuxOptions == nil || sc.SELinuxOptions.Type != "container_runtime_t" || sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeRuntimeDefault {
		t.Errorf("securityContext %+v, want the values' SELinux type and AppArmor profile", sc)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"}) || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("securityContext %+v: setting seLinuxOptions dropped the defaults", sc)
	}
}

// TestChartOpenShift: OpenShift's pod runs as SELinux type spc_t (the
// init container too: it connects to the runtime's sockets), and its
// service account may use the privileged SecurityContextConstraints.
func TestChartOpenShift(t *testing.T) {
	objs := render(t, "--set", "platform=openshift,nriCheck.enabled=true")
	spec := only[*appsv1.DaemonSet](t, objs).Spec.Template.Spec
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if sc := c.SecurityContext; sc == nil || sc.SELinuxOptions == nil || sc.SELinuxOptions.Type != "spc_t" {
			t.Errorf("container %s: securityContext %+v, want SELinux type spc_t", c.Name, sc)
		}
	}
	found := false
	for _, r := range only[*rbacv1.ClusterRole](t, objs).Rules {
		if slices.Equal(r.APIGroups, []string{"security.openshift.io"}) {
			found = slices.Equal(r.Resources, []string{"securitycontextconstraints"}) && slices.Equal(r.ResourceNames, []string{"privileged"}) && slices.Equal(r.Verbs, []string{"use"})
		}
	}
	if !found {
		t.Errorf("no rule to use the privileged SecurityContextConstraints")
	}
	for _, p := range helmchart.Platforms {
		if p == "openshift" {
			continue
		}
		for _, r := range only[*rbacv1.ClusterRole](t, render(t, "--set", "platform="+p)).Rules {
			if slices.Contains(r.APIGroups, "security.openshift.io") {
				t.Errorf("platform %q: a SecurityContextConstraints rule outside OpenShift", p)
			}
		}
	}
}

// TestChartDRAFollowsTheCluster: unset, dra.enabled follows the cluster:
// where the API server serves no resource.k8s.io/v1 or is older than 1.37,
// none of DRA's objects, rules or mounts is rendered and meshlet runs
// with --dra=false; set, it decides.
func TestChartDRAFollowsTheCluster(t *testing.T) {
	for _, c := range []struct {
		args []string
		dra  bool
	}{
		{nil, true},
		{[]string{"--kube-version", helmchart.OlderCluster}, false},
		{[]string{"--kube-version", "1.36.3"}, false},
		{[]string{"--set", "dra.enabled=false"}, false},
		{[]string{"--kube-version", "1.37.0", "--set", "dra.enabled=true"}, true},
	} {
		objs := render(t, c.args...)
		var classes int
		for _, o := range objs {
			if o.Kind == "DeviceClass" {
				classes++
			}
		}
		ds := only[*appsv1.DaemonSet](t, objs)
		e := env(t, ds)
		_, plugins := volumePaths(ds)["kubelet-plugins"]
		var sliceRule bool
		for _, r := range only[*rbacv1.ClusterRole](t, objs).Rules {
			sliceRule = sliceRule || slices.Contains(r.Resources, "resourceslices")
		}
		got := [4]bool{classes == 1, e["MESHLET_DRA"] == "true", plugins, sliceRule}
		if got != [4]bool{c.dra, c.dra, c.dra, c.dra} {
			t.Errorf("%v: DeviceClass, MESHLET_DRA, kubelet mounts, slice rule = %v, want all %v", c.args, got, c.dra)
		}
	}
}

// mountsEmptyDir reports whether the meshlet container mounts an emptyDir
// at path.
func mountsEmptyDir(ds *appsv1.DaemonSet, path string) bool {
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if m.MountPath == path && v.Name == m.Name && v.EmptyDir != nil {
				return true
			}
		}
	}
	return false
}
