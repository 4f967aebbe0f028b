package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestRevisionsSideBySide: two meshlets on one containerd, as two NRI
// plugins, each serving one Istio revision (stable, canary) with a ztunnel
// stand-in of its own, and a real kube-apiserver holding the namespaces'
// istio.io/rev labels and Istio's revision tags (MutatingWebhookConfigurations
// labelled istio.io/tag). Each mesh pod goes to exactly one of them:
//   - a namespace's revision label selects it, directly or through a tag;
//   - in a namespace without one, the pod's own label does; a namespace's
//     label wins over the pod's;
//   - a pod that selects no revision follows the default tag.
//
// Moving the default tag changes where new pods go; a running pod stays
// with the revision it started with (the canary meshlet sees it is meshed
// elsewhere and leaves it).
func TestRevisionsSideBySide(t *testing.T) {
	c, kubeconfig := apiServer(t)
	ctx := context.Background()
	for name, labels := range map[string]map[string]string{
		"stable-ns": {"istio.io/dataplane-mode": "ambient", "istio.io/rev": "stable"},
		"next-ns":   {"istio.io/dataplane-mode": "ambient", "istio.io/rev": "next"}, // a tag of canary
		"plain-ns":  {"istio.io/dataplane-mode": "ambient"},
	} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setTag(t, c, "default", "stable")
	setTag(t, c, "next", "canary")

	// After both meshlets stop (cleanups run last first): their node
	// tables stay on a stop, and later tests' pods may reuse the addresses.
	t.Cleanup(func() {
		for _, table := range []string{"meshlet-stable", "meshlet-canary"} {
			_, _ = theEnv(t).Exec("nft", "delete", "table", "inet", table)
		}
	})
	common := []string{"--kubeconfig=" + kubeconfig, "--dra=false"}
	stable := startMesh(t, append(common, "--revision=stable")...)
	canaryState := t.TempDir()
	canary := &mesh{t: t, env: theEnv(t), socket: filepath.Join(t.TempDir(), "zt.sock"), healthAddr: "127.0.0.1:9890",
		flags: append(common, "--revision=canary", "--state-dir="+canaryState, "--nri-plugin-index=11",
			"--health-addr=127.0.0.1:9890", "--metrics-addr=127.0.0.1:9891")}
	meshes := map[string]*mesh{"stable": stable, "canary": canary}

	type podCase struct {
		ns, name string
		labels   map[string]string
		want     string // the revision whose meshlet takes it
	}
	pods := []podCase{
		// Started before the canary meshlet.
		{"stable-ns", "by-namespace", nil, "stable"},
		{"plain-ns", "by-default-tag", nil, "stable"},
		{"next-ns", "by-tag", nil, "canary"},
		// Started with both.
		{"plain-ns", "by-pod-label", map[string]string{"istio.io/rev": "canary"}, "canary"},
		{"stable-ns", "namespace-wins", map[string]string{"istio.io/rev": "canary"}, "stable"},
	}
	uids, ips, netns := map[string]string{}, map[string]string{}, map[string]string{}
	for i, p := range pods {
		if i == 3 {
			// The canary meshlet starts beside stable's running pods: it
			// leaves them (and their rules) alone, and enrolls at once the
			// running pod that is its own, which no meshlet had taken.
			canary.start()
			waitForf(t, func() (bool, string) { return len(canary.adds(uids["by-tag"])) == 1, "" },
				func() string { return "the canary meshlet to enroll next-ns/by-tag, running since before it started" })
			for _, name := range []string{"by-namespace", "by-default-tag"} {
				if !hasRules(t, netns[name]) {
					t.Fatalf("%s: in-pod rules gone once the canary meshlet started", name)
				}
			}
		}
		uid, info := runLabelledAPIPod(t, c, p.ns, p.name, p.labels)
		uids[p.name], ips[p.name], netns[p.name] = uid, info.IP, info.NetnsPath
		if p.want == "canary" && i < 3 {
			continue // no canary meshlet yet
		}
		// The runtime's hooks ran before the sandbox was up: the pod's
		// meshlet has it, the other has decided it is not its own.
		for rev, m := range meshes {
			if m.zt == nil {
				continue
			}
			if got, want := len(m.adds(uid)), map[bool]int{true: 1, false: 0}[rev == p.want]; got != want {
				t.Errorf("%s/%s: %d ZDS Add(s) to the %s ztunnel, want %d", p.ns, p.name, got, rev, want)
			}
		}
		if !hasRules(t, info.NetnsPath) {
			t.Errorf("%s/%s: no in-pod rules", p.ns, p.name)
		}
	}
	// Exactly one meshlet has each pod, and says why the other does not.
	for _, p := range pods {
		for rev, m := range meshes {
			if got, want := len(m.adds(uids[p.name])), map[bool]int{true: 1, false: 0}[rev == p.want]; got != want {
				t.Errorf("%s/%s: %d ZDS Add(s) to the %s ztunnel, want %d", p.ns, p.name, got, rev, want)
			}
		}
		other := map[string]string{"stable": canaryState, "canary": theEnv(t).MeshletStateDir()}[p.want]
		if d, _ := debugPod(t, other, uids[p.name]); d.State != "skipped" || (d.Reason != "other-revision" && d.Reason != "no-revision") {
			t.Errorf("%s/%s in the other meshlet's /debug/pods: %+v, want skipped as another revision's", p.ns, p.name, d)
		}
	}
	// Each meshlet's node rules hold its own pods' addresses only.
	for rev := range meshes {
		set := nodeProbeSet(t, "meshlet-"+rev)
		for _, p := range pods {
			if got := probeSetHas(set, ips[p.name]); got != (rev == p.want) {
				t.Errorf("table inet meshlet-%s's probe set has %s/%s (%s) = %v, want %v:\n%s", rev, p.ns, p.name, ips[p.name], got, rev == p.want, set)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The default tag moves to canary: pods that start from now on are
	// canary's; the running one stays with stable. The canary meshlet
	// re-decides it (the tags changed) and finds it meshed elsewhere: the
	// status stable put on it, with stable's revision.
	waitForf(t, func() (bool, string) {
		p, err := c.CoreV1().Pods("plain-ns").Get(ctx, "by-default-tag", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Annotations["ambient.istio.io/redirection"] == "enabled" && p.Annotations["meshlet.dev/revision"] == "stable", fmt.Sprint(p.Annotations)
	}, func() string { return "plain-ns/by-default-tag's status: redirection enabled by revision stable" })
	setTag(t, c, "default", "canary")
	waitForf(t, func() (bool, string) {
		p, ok := debugPod(t, canaryState, uids["by-default-tag"])
		return ok && p.Reason == "meshed-elsewhere", fmt.Sprintf("%+v", p)
	}, func() string {
		return "the canary meshlet to leave plain-ns/by-default-tag to stable (reason meshed-elsewhere) once the default tag is canary's"
	})
	if p, _ := debugPod(t, theEnv(t).MeshletStateDir(), uids["by-default-tag"]); p.State != "enrolled" {
		t.Errorf("plain-ns/by-default-tag in the stable meshlet after the default tag moved: %+v, want still enrolled", p)
	}
	if n := len(canary.adds(uids["by-default-tag"])); n != 0 {
		t.Errorf("plain-ns/by-default-tag: %d ZDS Add(s) to the canary ztunnel after the default tag moved, want 0", n)
	}
	// Both meshlets have read the move before the next pod starts.
	for rev, dir := range map[string]string{"stable": theEnv(t).MeshletStateDir(), "canary": canaryState} {
		waitForf(t, func() (bool, string) {
			tags := readDebug(t, dir).RevisionTags
			return slices.Contains(tags, "default") == (rev == "canary"), fmt.Sprint(tags)
		}, func() string { return "the " + rev + " meshlet to read the default tag's move to canary" })
	}
	uid, _ := runLabelledAPIPod(t, c, "plain-ns", "after-the-move", nil)
	if s, k := len(stable.adds(uid)), len(canary.adds(uid)); s != 0 || k != 1 {
		t.Errorf("plain-ns/after-the-move: %d Add(s) to stable, %d to canary; want 0 and 1", s, k)
	}
}

// setTag points Istio's revision tag at revision, as istioctl tag set
// does: a MutatingWebhookConfiguration istio-revision-tag-<tag> labelled
// istio.io/tag and istio.io/rev (its webhooks do not matter here).
func setTag(t *testing.T, c kubernetes.Interface, tag, revision string) {
	t.Helper()
	ctx := context.Background()
	hooks := c.AdmissionregistrationV1().MutatingWebhookConfigurations()
	want := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
		Name: "istio-revision-tag-" + tag, Labels: map[string]string{"istio.io/tag": tag, "istio.io/rev": revision}}}
	cur, err := hooks.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		if _, err := hooks.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	cur.Labels = want.Labels
	if _, err := hooks.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// nodeProbeSet lists the node's probe SNAT set of one meshlet's table.
func nodeProbeSet(t *testing.T, table string) string {
	t.Helper()
	out, err := theEnv(t).Exec("nft", "list", "set", "inet", table, "probe-pods-v4")
	if err != nil {
		t.Fatalf("nft list set inet %s probe-pods-v4: %v", table, err)
	}
	return out
}

// probeSetHas reports whether an nft set listing has ip as an element.
func probeSetHas(listing, ip string) bool {
	_, elements, ok := strings.Cut(listing, "elements = {")
	if !ok {
		return false
	}
	elements, _, _ = strings.Cut(elements, "}")
	for _, e := range strings.Split(elements, ",") {
		if strings.TrimSpace(e) == ip {
			return true
		}
	}
	return false
}

// debugView is what /debug/pods says, in part.
type debugView struct {
	RevisionTags []string
	Pods         []struct{ UID, State, Reason string }
}

// readDebug reads /debug/pods of the meshlet whose --state-dir is
// stateDir.
func readDebug(t *testing.T, stateDir string) (v debugView) {
	t.Helper()
	getDebug(t, stateDir, "/debug/pods", &v)
	return v
}

// debugPod reads one pod from the /debug/pods of the meshlet whose
// --state-dir is stateDir; false when it does not know the pod.
func debugPod(t *testing.T, stateDir, uid string) (p struct{ UID, State, Reason string }, ok bool) {
	t.Helper()
	pods := readDebug(t, stateDir).Pods
	i := slices.IndexFunc(pods, func(p struct{ UID, State, Reason string }) bool { return p.UID == uid })
	if i < 0 {
		return p, false
	}
	return pods[i], true
}
