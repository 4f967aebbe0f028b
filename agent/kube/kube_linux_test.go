package kube_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/policy"
)

const node = "node-a"

var seq atomic.Int64

func admin(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(api(t).Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// namespace creates a namespace with labels and its default service account
// (no controller-manager runs here to create it).
func namespace(t testing.TB, c kubernetes.Interface, labels map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e6, seq.Add(1))
	_, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	must(t, err)
	serviceAccount(t, c, name, "default")
	return name
}

func serviceAccount(t testing.TB, c kubernetes.Interface, ns, name string) {
	t.Helper()
	_, err := c.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// boundPod creates a pod already bound to the node (no scheduler here).
func boundPod(t testing.TB, c kubernetes.Interface, ns, name, sa string, labels map[string]string) *corev1.Pod {
	t.Helper()
	return podOn(t, c, node, ns, name, sa, labels)
}

func podOn(t testing.TB, c kubernetes.Interface, nodeName, ns, name, sa string, labels map[string]string) *corev1.Pod {
	t.Helper()
	if sa != "" {
		serviceAccount(t, c, ns, sa)
	}
	p, err := c.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: nodeName, ServiceAccountName: sa, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "app", Image: "meshlet.test/pause:1"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	return p
}

// sandbox is what the runtime would report for the pod (labels fixed at
// creation).
func sandbox(p *corev1.Pod) enroll.Pod {
	labels := map[string]string{}
	for k, v := range p.Labels {
		labels[k] = v
	}
	return enroll.Pod{UID: string(p.UID), Name: p.Name, Namespace: p.Namespace, Labels: labels, NetnsPath: "/netns/" + p.Name}
}

func startWatcher(t testing.TB, c kubernetes.Interface) (*kube.Watcher, context.Context) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	w := kube.NewWatcher(c, kube.WatcherConfig{NodeName: node,
		GetTimeout: 300 * time.Millisecond, Debounce: 20 * time.Millisecond})
	w.Start(ctx)
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	must(t, w.WaitForSync(sctx))
	return w, ctx
}

// Stand-ins for the kernel-facing ports: the subject here is the API.
type fakeNetns struct{ ino uint64 }

func (n fakeNetns) Inode() uint64                      { return n.ino }
func (n fakeNetns) Cookie() (uint64, error)            { return n.ino, nil }
func (n fakeNetns) WithFd(fn func(fd int) error) error { return fn(0) }
func (n fakeNetns) HoldsAddrs([]netip.Addr) error      { return nil }
func (n fakeNetns) PodAddrs() ([]netip.Addr, error) {
	return []netip.Addr{netip.AddrFrom4([4]byte{10, byte(n.ino >> 16), byte(n.ino >> 8), byte(n.ino)})}, nil
}
func (n fakeNetns) Close() error { return nil }

type fakePorts struct {
	mu  sync.Mutex
	sas map[string]string // uid → service account ztunnel got
}

func (f *fakePorts) Open(path string) (enroll.Netns, error) {
	return fakeNetns{ino: uint64(len(path))}, nil
}
func (f *fakePorts) Apply(context.Context, *enroll.Workload, *enroll.Record) (string, error) {
	return "", nil
}
func (f *fakePorts) Account(*enroll.Record) (string, error) { return "", nil }
func (f *fakePorts) Remove(context.Context, *enroll.Workload, enroll.RemoveScope) error {
	return nil
}
func (f *fakePorts) AddWorkload(_ context.Context, w *enroll.Workload, _ enroll.Handover) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sas[w.UID] = w.ServiceAccount
	return nil
}
func (f *fakePorts) DelWorkload(_ context.Context, uid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sas, uid)
	return nil
}
func (f *fakePorts) ForgetInherited(context.Context, string) error { return nil }
func (f *fakePorts) sa(uid string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sas[uid]
	return s, ok
}

type noStatus struct{}

func (noStatus) Report(enroll.PodRef, enroll.RedirectionStatus) {}

func newCore(t testing.TB, resolver enroll.PodInfoResolver, status enroll.StatusReporter) (*enroll.Core, *fakePorts) {
	pol, err := policy.New(policy.Defaults())
	must(t, err)
	f := &fakePorts{sas: map[string]string{}}
	c, err := enroll.New(enroll.Ports{Resolver: resolver, Policy: pol, Settings: []enroll.SettingsSource{pol},
		Opener: f, Redirector: f, Proxy: f, Status: status}, enroll.Config{})
	must(t, err)
	return c, f
}

// eventually waits for cond, polling: the API's watch delivers changes
// asynchronously.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var ambient = map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeAmbient}

// TestEnrollmentFollowsTheAPI: a pod in a labelled namespace is enrolled
// with its real service account; its opt-out label releases it; removing
// the namespace label releases the rest; adding it back enrolls them again.
func TestEnrollmentFollowsTheAPI(t *testing.T) {
	c := admin(t)
	ns := namespace(t, c, ambient)
	optOut := boundPod(t, c, ns, "reviews", "reviews", nil)
	stays := boundPod(t, c, ns, "ratings", "", nil)
	w, ctx := startWatcher(t, c)
	core, ports := newCore(t, w, noStatus{})
	go w.RunReevaluation(ctx, core.Reevaluate)

	for _, p := range []*corev1.Pod{optOut, stays} {
		res, err := core.Enroll(ctx, sandbox(p))
		if err != nil || !res.Enrolled || res.Reason != policy.ReasonNamespaceLabel {
			t.Fatalf("Enroll(%s) = %+v, %v", p.Name, res, err)
		}
	}
	if sa, _ := ports.sa(string(optOut.UID)); sa != "reviews" {
		t.Fatalf("ztunnel got service account %q, want reviews", sa)
	}
	if sa, _ := ports.sa(string(stays.UID)); sa != "default" {
		t.Fatalf("ztunnel got service account %q, want default", sa)
	}
	state := func(p *corev1.Pod) enroll.State { st, _ := core.Status(string(p.UID)); return st.State }

	optOut.Labels = map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeNone}
	_, err := c.CoreV1().Pods(ns).Update(ctx, optOut, metav1.UpdateOptions{})
	must(t, err)
	eventually(t, "the opted-out pod released", func() bool { return state(optOut) == enroll.StateSkipped })
	if state(stays) != enroll.StateEnrolled {
		t.Fatalf("the other pod changed state: %s", state(stays))
	}

	setNSLabels(t, c, ns, nil)
	eventually(t, "pods released with the namespace label", func() bool { return state(stays) == enroll.StateSkipped })
	setNSLabels(t, c, ns, ambient)
	eventually(t, "pods enrolled again", func() bool { return state(stays) == enroll.StateEnrolled })
	if state(optOut) != enroll.StateSkipped {
		t.Fatalf("opted-out pod re-enrolled by its namespace")
	}
}

func setNSLabels(t testing.TB, c kubernetes.Interface, ns string, labels map[string]string) {
	t.Helper()
	n, err := c.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	must(t, err)
	n.Labels = labels
	_, err = c.CoreV1().Namespaces().Update(context.Background(), n, metav1.UpdateOptions{})
	must(t, err)
}

// TestResolveNotYetWatchedPod: a pod the informer has not seen is fetched
// directly. (The pod is bound to another node, so this watcher's informer,
// filtered on spec.nodeName, never has it: the GET path is certain.)
func TestResolveNotYetWatchedPod(t *testing.T) {
	c := admin(t)
	ns := namespace(t, c, nil)
	w, ctx := startWatcher(t, c)
	before := w.Fallbacks.Load()
	p := podOn(t, c, "node-b", ns, "fresh", "fresh-sa", ambient)
	info, err := w.Resolve(ctx, ptr(sandbox(p)))
	must(t, err)
	if info.ServiceAccount != "fresh-sa" || info.PodLabels[policy.DataplaneModeLabel] != "ambient" {
		t.Fatalf("Resolve = %+v", info)
	}
	if w.Fallbacks.Load() != before+1 {
		t.Fatalf("fallback GET not counted")
	}
}

func ptr[T any](v T) *T { return &v }

// restrictedClient returns a client authenticated as the meshlet service
// account of deploy/rbac.yaml, with only that role, as the DaemonSet's
// pod on node is: its token bound to that pod.
func restrictedClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	return meshletOn(t, admin(t), node)
}

// unboundMeshlet returns a client authenticated as deploy/rbac.yaml's
// meshlet service account with a token bound to no pod (a long-lived
// Secret's, say): no node.
func unboundMeshlet(t *testing.T) kubernetes.Interface {
	t.Helper()
	c := admin(t)
	applyRBAC(t, c)
	tok, err := c.CoreV1().ServiceAccounts("meshlet-system").CreateToken(context.Background(), "meshlet",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	must(t, err)
	rc, err := kubernetes.NewForConfig(api(t).ConfigWithToken(tok.Status.Token))
	must(t, err)
	return rc
}

// applyRBAC creates deploy/rbac.yaml's objects (once: later calls find
// them).
func applyRBAC(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	_, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshlet-system"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	applyManifest(t, c, "rbac.yaml")
}

// applyManifest creates the objects of deploy/<name>, decoded strictly
// (objects that exist already are left as they are).
func applyManifest(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../../deploy", name))
	must(t, err)
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var tm metav1.TypeMeta
		must(t, yaml.Unmarshal([]byte(doc), &tm))
		switch tm.Kind {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			must(t, yaml.UnmarshalStrict([]byte(doc), &o))
			_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(context.Background(), &o, metav1.CreateOptions{})
		case "ClusterRole":
			_, err = create(t, doc, c.RbacV1().ClusterRoles().Create)
		case "ClusterRoleBinding":
			_, err = create(t, doc, c.RbacV1().ClusterRoleBindings().Create)
		case "ValidatingAdmissionPolicy":
			_, err = create(t, doc, c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create)
		case "ValidatingAdmissionPolicyBinding":
			_, err = create(t, doc, c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create)
		case "DeviceClass":
			_, err = create(t, doc, c.ResourceV1().DeviceClasses().Create)
		case "MutatingAdmissionPolicy":
			_, err = create(t, doc, c.AdmissionregistrationV1().MutatingAdmissionPolicies().Create)
		case "MutatingAdmissionPolicyBinding":
			_, err = create(t, doc, c.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create)
		default:
			t.Fatalf("unexpected kind %q in deploy/%s", tm.Kind, name)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("deploy/%s: create %s: %v", name, tm.Kind, err)
		}
	}
}

// create decodes doc strictly into a new T and creates it.
func create[T any](t *testing.T, doc string, fn func(context.Context, *T, metav1.CreateOptions) (*T, error)) (*T, error) {
	t.Helper()
	o := new(T)
	must(t, yaml.UnmarshalStrict([]byte(doc), o))
	return fn(context.Background(), o, metav1.CreateOptions{})
}

// TestRBAC: the role in deploy/rbac.yaml allows exactly what meshlet does.
func TestRBAC(t *testing.T) {
	c := admin(t)
	rc := restrictedClient(t)
	ns := namespace(t, c, nil)
	p := boundPod(t, c, ns, "rbac", "", nil)
	ctx := context.Background()

	// Everything meshlet does works: the watcher syncs, the patcher patches.
	w, wctx := startWatcher(t, rc)
	if _, err := w.Resolve(wctx, ptr(sandbox(p))); err != nil {
		t.Fatal(err)
	}
	_, err := rc.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+kube.RedirectionAnnotation+`":"enabled"}}}`), metav1.PatchOptions{}, "status")
	must(t, err)
	_, err = rc.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name}, Reason: "Test", Message: "m", Type: "Normal"}, metav1.CreateOptions{})
	must(t, err)
	// The node settings' ConfigMap (the chart's, by name), watched.
	settings, err := c.CoreV1().ConfigMaps("meshlet-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "meshlet-settings"},
		Data: map[string]string{"settings.yaml": "apiVersion: meshlet.dev/v1alpha1\nkind: NodeSettings\n"}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		settings, err = c.CoreV1().ConfigMaps("meshlet-system").Get(ctx, "meshlet-settings", metav1.GetOptions{})
	}
	must(t, err)
	cmw := kube.WatchConfigMaps(rc, []kube.ObjectRef{{Namespace: "meshlet-system", Name: "meshlet-settings"}}, func(int) {})
	cmw.Start(wctx)
	syncCtx, cancelSync := context.WithTimeout(wctx, 30*time.Second)
	defer cancelSync()
	must(t, cmw.WaitForSync(syncCtx))
	if got := cmw.Get(0); got == nil || got.ResourceVersion != settings.ResourceVersion {
		t.Fatalf("settings ConfigMap through the watch as meshlet: %+v, want resourceVersion %s", got, settings.ResourceVersion)
	}

	// And nothing more.
	forbidden := map[string]error{
		"patch pod spec": func() error {
			_, err := rc.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}(),
		"delete pod": rc.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}),
		"list secrets": func() error {
			_, err := rc.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		}(),
		"update namespace": func() error {
			n, _ := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			_, err := rc.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}(),
		"list every ConfigMap": func() error {
			_, err := rc.CoreV1().ConfigMaps("meshlet-system").List(ctx, metav1.ListOptions{})
			return err
		}(),
		"get another ConfigMap": func() error {
			_, err := rc.CoreV1().ConfigMaps("meshlet-system").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err
		}(),
		"update the settings": func() error {
			_, err := rc.CoreV1().ConfigMaps("meshlet-system").Update(ctx, settings, metav1.UpdateOptions{})
			return err
		}(),
	}
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as meshlet: %v, want Forbidden", what, err)
		}
	}

	// pods/status patch: RBAC allows it for every pod and every field of
	// its metadata; the policy narrows it to the node's own pods and
	// meshlet's annotations.
	elsewhere := podOn(t, c, "node-b", ns, "rbac-elsewhere", "", nil)
	statusPatch := func(rc kubernetes.Interface, p *corev1.Pod, patch string, opts metav1.PatchOptions) error {
		_, err := rc.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), opts, "status")
		return err
	}
	ours := `{"metadata":{"annotations":{"` + kube.RedirectionAnnotation + `":"enabled"}}}`
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := statusPatch(rc, elsewhere, ours, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if refusedByPodsVAP(err, "node-b") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ValidatingAdmissionPolicy %s not enforced after 30s: last answer %v", podsVAP, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct {
		what  string
		rc    kubernetes.Interface
		pod   *corev1.Pod
		patch string
		want  string
	}{
		{"another node's pod's status", rc, elsewhere, ours, "may not change pod rbac-elsewhere on node 'node-b'"},
		{"a label", rc, p, `{"metadata":{"labels":{"istio.io/dataplane-mode":"none"}}}`, "labels"},
		{"another annotation", rc, p, `{"metadata":{"annotations":{"sidecar.istio.io/inject":"true"}}}`, "only its own annotations"},
		{"another annotation's removal", rc, p, `{"metadata":{"annotations":{"kept":null}}}`, "only its own annotations"},
		{"a finalizer", rc, p, `{"metadata":{"finalizers":["example.com/hold"]}}`, "finalizers or owners"},
		{"the status", rc, p, `{"status":{"message":"meshed"}}`, "may not change a pod's status"},
		{"with a token bound to no pod", unboundMeshlet(t), p, ours, "not bound to a pod on a node"},
	} {
		if c.what == "another annotation's removal" {
			_, err := admin(t).CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"kept":"x"}}}`), metav1.PatchOptions{})
			must(t, err)
		}
		if err := statusPatch(c.rc, c.pod, c.patch, metav1.PatchOptions{}); !refusedByPodsVAP(err, c.want) {
			t.Errorf("meshlet changing %s: %v, want refused by %s with %q", c.what, err, podsVAP, c.want)
		}
	}
	// Its own annotations on its node's pods, both ways: allowed.
	must(t, statusPatch(rc, p, `{"metadata":{"annotations":{"`+kube.RedirectionAnnotation+`":null,"`+policy.RevisionAnnotation+`":"canary"}}}`, metav1.PatchOptions{}))
}

// podsVAP is the name of the ValidatingAdmissionPolicy on meshlet's
// pods/status patches (deploy/rbac.yaml).
const podsVAP = "meshlet-pods"

// refusedByPodsVAP: err is that policy's refusal (reason Forbidden),
// containing want.
func refusedByPodsVAP(err error, want string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+podsVAP+"'") &&
		strings.Contains(err.Error(), want)
}

// TestStatusAnnotation: pending → enabled → removed on the status
// subresource, as the restricted service account.
func TestStatusAnnotation(t *testing.T) {
	c := admin(t)
	rc := restrictedClient(t)
	ns := namespace(t, c, nil)
	p := boundPod(t, c, ns, "status", "", nil)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A meshlet with a revision: its revision goes with the status.
	sp := kube.NewStatusPatcher(rc, "canary")
	go sp.Run(ctx)
	ref := enroll.PodRef{UID: string(p.UID), Name: p.Name, Namespace: ns}
	annotation := func() (string, bool) {
		got, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		must(t, err)
		v, ok := got.Annotations[kube.RedirectionAnnotation]
		if rev, has := got.Annotations[policy.RevisionAnnotation]; has != ok || (has && rev != "canary") {
			t.Fatalf("status %q (present %v) with revision %q (present %v), want revision canary exactly with a status", v, ok, rev, has)
		}
		return v, ok
	}
	for _, step := range []struct {
		st   enroll.RedirectionStatus
		want string
	}{{enroll.RedirectionPending, "pending"}, {enroll.RedirectionEnabled, "enabled"}, {enroll.RedirectionRemoved, ""}} {
		sp.Report(ref, step.st)
		eventually(t, "annotation "+step.want, func() bool {
			v, ok := annotation()
			return sp.Pending() == 0 && v == step.want && ok == (step.want != "")
		})
	}
	// A recreated pod with the same name is not patched with the old one's
	// status (uid precondition).
	sp.Report(enroll.PodRef{UID: "not-the-uid", Name: p.Name, Namespace: ns}, enroll.RedirectionEnabled)
	eventually(t, "the stale report dropped", func() bool { return sp.Pending() == 0 })
	if v, ok := annotation(); ok {
		t.Fatalf("a report for another uid patched the pod: %q", v)
	}
}

// TestAPIDown: with the API server gone, a pod whose own labels select it
// is enrolled within the hook's budget; status reported meanwhile is
// applied once the API is back.
func TestAPIDown(t *testing.T) {
	c := admin(t)
	ns := namespace(t, c, nil)
	known := boundPod(t, c, ns, "known", "known-sa", nil)
	unseen := boundPod(t, c, ns, "unseen", "unseen-sa", ambient)
	w, ctx := startWatcher(t, c)
	sp := kube.NewStatusPatcher(c, "")
	go sp.Run(ctx)
	core, ports := newCore(t, w, sp)

	must(t, api(t).StopAPIServer())
	restarted := false
	defer func() {
		if !restarted {
			_ = api(t).StartAPIServer()
		}
	}()
	// The informer's copy of known still answers.
	info, err := w.Resolve(ctx, ptr(sandbox(known)))
	must(t, err)
	if info.ServiceAccount != "known-sa" {
		t.Fatalf("cached pod resolved to %q", info.ServiceAccount)
	}
	// A pod the informer never saw (pretend: a new UID) is decided from the
	// sandbox's labels, inside the hook's budget.
	sb := sandbox(unseen)
	sb.UID = "uid-never-seen"
	hookCtx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	res, err := core.Enroll(hookCtx, sb)
	if err != nil || !res.Enrolled {
		t.Fatalf("Enroll with the API down = %+v, %v; want enrolled from the sandbox's labels within 1.5s", res, err)
	}
	if w.Degraded.Load() == 0 {
		t.Fatalf("degraded resolution not counted")
	}
	if _, ok := ports.sa("uid-never-seen"); !ok {
		t.Fatal("ztunnel did not get the pod")
	}
	sp.Report(enroll.PodRef{UID: string(unseen.UID), Name: unseen.Name, Namespace: ns}, enroll.RedirectionEnabled)
	must(t, api(t).StartAPIServer())
	restarted = true
	eventually(t, "status applied after the API came back", func() bool {
		got, err := c.CoreV1().Pods(ns).Get(ctx, unseen.Name, metav1.GetOptions{})
		return err == nil && got.Annotations[kube.RedirectionAnnotation] == "enabled"
	})
}

// TestEnrollFailedEvents: failures become a Warning event on the pod, with
// the step and the cause; a pod failing in a loop is aggregated, not a
// flood of objects.
func TestEnrollFailedEvents(t *testing.T) {
	c := admin(t)
	ns := namespace(t, c, nil)
	p := boundPod(t, c, ns, "failing", "", nil)
	ev := kube.NewEvents(c, node)
	defer ev.Shutdown()
	ref := enroll.PodRef{UID: string(p.UID), Name: p.Name, Namespace: ns}
	cause := &enroll.Error{UID: ref.UID, Step: enroll.StepProxy, Err: fmt.Errorf("no ztunnel connected")}
	for range 50 {
		ev.EnrollFailed(ref, cause)
	}
	var events []corev1.Event
	eventually(t, "the event", func() bool {
		l, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		must(t, err)
		events = l.Items
		return len(events) > 0 && events[0].Count > 1
	})
	e := events[0]
	if e.Type != corev1.EventTypeWarning || e.Reason != "MeshEnrollFailed" || e.InvolvedObject.UID != p.UID ||
		!strings.Contains(e.Message, "ztunnel") || !strings.Contains(e.Message, "no ztunnel connected") {
		t.Fatalf("event %+v", e)
	}
	if len(events) > 2 {
		t.Fatalf("%d event objects for one failing pod, want them aggregated", len(events))
	}
}

func TestRESTConfigNamesTheWayOut(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := kube.RESTConfig("")
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig") || !strings.Contains(err.Error(), "--standalone") {
		t.Fatalf("RESTConfig outside a cluster = %v, want an error naming --kubeconfig and --standalone", err)
	}
	if _, err := kube.RESTConfig("/nonexistent/kubeconfig"); err == nil || !strings.Contains(err.Error(), "--kubeconfig=/nonexistent/kubeconfig") {
		t.Fatalf("RESTConfig with a missing file = %v", err)
	}
}

// TestDegradedPodReenrolledWhenAPIReturns: a node whose meshlet starts
// while the API server is down decides pods from their sandboxes' labels
// (service account "default"); once the API answers, each such pod is
// re-enrolled with its real service account.
func TestDegradedPodReenrolledWhenAPIReturns(t *testing.T) {
	c := admin(t)
	ns := namespace(t, c, nil)
	p := boundPod(t, c, ns, "boot", "real-sa", ambient)
	must(t, api(t).StopAPIServer())
	restarted := false
	defer func() {
		if !restarted {
			_ = api(t).StartAPIServer()
		}
	}()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := kube.NewWatcher(c, kube.WatcherConfig{NodeName: node,
		GetTimeout: 300 * time.Millisecond, Debounce: 20 * time.Millisecond})
	w.Start(ctx)
	core, ports := newCore(t, w, noStatus{})
	go w.RunReevaluation(ctx, core.Reevaluate)
	hookCtx, hcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer hcancel()
	if res, err := core.Enroll(hookCtx, sandbox(p)); err != nil || !res.Enrolled {
		t.Fatalf("Enroll with the API down = %+v, %v", res, err)
	}
	if sa, _ := ports.sa(string(p.UID)); sa != enroll.DefaultServiceAccount {
		t.Fatalf("service account %q while the API is down, want %q", sa, enroll.DefaultServiceAccount)
	}
	must(t, api(t).StartAPIServer())
	restarted = true
	eventually(t, "re-enrollment with the real service account", func() bool {
		sa, _ := ports.sa(string(p.UID))
		return sa == "real-sa"
	})
}

// TestStaticPodResolvedThroughItsMirror: a static pod's sandbox carries the
// static pod's UID, which the API server knows only as its mirror pod's
// kubernetes.io/config.mirror annotation (the mirror has a UID of its
// own). The pod is resolved through its mirror, from the informer and by
// the fallback GET alike, and never counted as degraded.
func TestStaticPodResolvedThroughItsMirror(t *testing.T) {
	c := admin(t)
	ns := namespace(t, c, nil)
	w, ctx := startWatcher(t, c)
	const staticUID = "6e5f0b3c1d2a49f8a7b6c5d4e3f2a1b0"
	mirror, err := c.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "static-web-" + node, Labels: ambient,
			Annotations: map[string]string{kube.MirrorAnnotation: staticUID, "kubernetes.io/config.source": "file"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "meshlet.test/pause:1"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	if string(mirror.UID) == staticUID {
		t.Fatal("the mirror pod took the static pod's UID: the test shows nothing")
	}
	// A sandbox that does not say it is a static pod's (the kubelet puts
	// the pod's source on the sandbox) is never matched to a mirror: any
	// pod author can write the annotation.
	notStatic := enroll.Pod{UID: staticUID, Name: mirror.Name, Namespace: ns, NetnsPath: "/netns/static",
		Annotations: map[string]string{kube.SourceAnnotation: "api"}}
	if info, err := w.Resolve(ctx, &notStatic); err != nil || !info.Unknown {
		t.Fatalf("a sandbox of source api resolved through a mirror-annotated pod: %+v, %v; want unknown", info, err)
	}
	// Nor to one bound to another node.
	const otherUID = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	_, err = c.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "static-db", Labels: ambient, Annotations: map[string]string{kube.MirrorAnnotation: otherUID}},
		Spec:       corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "db", Image: "meshlet.test/pause:1"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	elsewhere := enroll.Pod{UID: otherUID, Name: "static-db", Namespace: ns, NetnsPath: "/netns/static-db",
		Annotations: map[string]string{kube.SourceAnnotation: "file"}}
	if info, err := w.Resolve(ctx, &elsewhere); err != nil || !info.Unknown {
		t.Fatalf("a static pod's sandbox resolved through another node's mirror-annotated pod: %+v, %v; want unknown", info, err)
	}
	sb := enroll.Pod{UID: staticUID, Name: mirror.Name, Namespace: ns, NetnsPath: "/netns/static",
		Annotations: map[string]string{kube.SourceAnnotation: "file"}}
	degraded := w.Degraded.Load()
	check := func(from string) {
		t.Helper()
		info, err := w.Resolve(ctx, &sb)
		must(t, err)
		if info.Unknown || info.PodLabels[policy.DataplaneModeLabel] != policy.DataplaneModeAmbient {
			t.Fatalf("static pod resolved (%s) as %+v; want its mirror's labels", from, info)
		}
		if got := w.Degraded.Load(); got != degraded {
			t.Fatalf("static pod resolved (%s) counted as degraded (%d → %d)", from, degraded, got)
		}
	}
	check("the fallback GET, or the informer")
	// Until a Resolve needs no GET: the informer's copy resolves it too.
	deadline := time.Now().Add(30 * time.Second)
	for {
		before := w.Fallbacks.Load()
		check("the informer, or the fallback GET")
		if w.Fallbacks.Load() == before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer never listed the mirror pod")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
