package deploy_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/meshlet/meshlet/draplugin/apis/v1alpha1"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env/kubeenv"
)

// shared is a real etcd + kube-apiserver.
var shared privtest.Shared[*kubeenv.Env]

func TestMain(m *testing.M) { os.Exit(kubeenv.RunTests(m, "deploy", &shared)) }

// dryRun creates a manifest's object with a server-side dry run: the API
// server validates and admits it, and stores nothing.
var dryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// docs splits a manifest file into its YAML documents, each with its kind.
func docs(t *testing.T, file string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out[tm.Kind] = append(out[tm.Kind], doc)
	}
	return out
}

// create decodes doc strictly (an unknown or misspelt field is an error,
// not silently dropped) and dry-runs its creation.
func create[T any](t *testing.T, file, doc string, obj *T, fn func(context.Context, *T, metav1.CreateOptions) (*T, error)) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if _, err := fn(context.Background(), obj, dryRun); err != nil {
		t.Fatalf("%s: %T: %v", file, obj, err)
	}
}

// TestDeployManifests: deploy/*.yaml (generated from the Helm chart) and
// deploy/examples/*.yaml pass the API server's validation (server-side dry
// run), in the namespace they name (the examples, which name none: in a
// test namespace).
func TestDeployManifests(t *testing.T) {
	c, err := kubernetes.NewForConfig(shared.Get(t).Config())
	if err != nil {
		t.Fatal(err)
	}
	// The namespace the other manifests go into, created for real (not a
	// dry run): `kubectl apply -f deploy/` applies it first.
	nsDocs := docs(t, "00-namespace.yaml")
	for kind, ds := range nsDocs {
		for _, doc := range ds {
			if kind != "Namespace" {
				t.Fatalf("unexpected kind %q in deploy/00-namespace.yaml", kind)
			}
			var ns corev1.Namespace
			if err := yaml.UnmarshalStrict([]byte(doc), &ns); err != nil {
				t.Fatalf("00-namespace.yaml: %v", err)
			}
			if _, err := c.CoreV1().Namespaces().Create(context.Background(), &ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("00-namespace.yaml: %v", err)
			}
		}
	}
	if len(nsDocs["Namespace"]) != 1 {
		t.Fatalf("%d Namespace in deploy/00-namespace.yaml, want 1", len(nsDocs["Namespace"]))
	}

	rbac := docs(t, "rbac.yaml")
	for kind, ds := range rbac {
		for _, doc := range ds {
			switch kind {
			case "ServiceAccount":
				create(t, "rbac.yaml", doc, &corev1.ServiceAccount{}, func(ctx context.Context, o *corev1.ServiceAccount, opts metav1.CreateOptions) (*corev1.ServiceAccount, error) {
					return c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
				})
			case "ClusterRole":
				create(t, "rbac.yaml", doc, &rbacv1.ClusterRole{}, c.RbacV1().ClusterRoles().Create)
			case "ClusterRoleBinding":
				create(t, "rbac.yaml", doc, &rbacv1.ClusterRoleBinding{}, c.RbacV1().ClusterRoleBindings().Create)
			case "ValidatingAdmissionPolicy":
				create(t, "rbac.yaml", doc, &admissionv1.ValidatingAdmissionPolicy{}, c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create)
			case "ValidatingAdmissionPolicyBinding":
				create(t, "rbac.yaml", doc, &admissionv1.ValidatingAdmissionPolicyBinding{}, c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create)
			default:
				t.Fatalf("unexpected kind %q in deploy/rbac.yaml", kind)
			}
		}
	}
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if len(rbac[kind]) == 0 {
			t.Errorf("no %s in deploy/rbac.yaml", kind)
		}
	}

	meshlet := docs(t, "meshlet.yaml")
	for kind, ds := range meshlet {
		for _, doc := range ds {
			switch kind {
			case "DaemonSet":
				create(t, "meshlet.yaml", doc, &appsv1.DaemonSet{}, func(ctx context.Context, o *appsv1.DaemonSet, opts metav1.CreateOptions) (*appsv1.DaemonSet, error) {
					return c.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, opts)
				})
			case "ConfigMap":
				create(t, "meshlet.yaml", doc, &corev1.ConfigMap{}, func(ctx context.Context, o *corev1.ConfigMap, opts metav1.CreateOptions) (*corev1.ConfigMap, error) {
					return c.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, opts)
				})
			default:
				t.Fatalf("unexpected kind %q in deploy/meshlet.yaml", kind)
			}
		}
	}
	if len(meshlet["DaemonSet"]) == 0 {
		t.Fatal("no DaemonSet in deploy/meshlet.yaml")
	}

	dra := docs(t, "dra.yaml")
	for kind, ds := range dra {
		for _, doc := range ds {
			switch kind {
			case "DeviceClass":
				create(t, "dra.yaml", doc, &resourcev1.DeviceClass{}, c.ResourceV1().DeviceClasses().Create)
			case "ValidatingAdmissionPolicy":
				create(t, "dra.yaml", doc, &admissionv1.ValidatingAdmissionPolicy{}, c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create)
			case "ValidatingAdmissionPolicyBinding":
				create(t, "dra.yaml", doc, &admissionv1.ValidatingAdmissionPolicyBinding{}, c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create)
			default:
				t.Fatalf("unexpected kind %q in deploy/dra.yaml", kind)
			}
		}
	}
	for _, kind := range []string{"DeviceClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if len(dra[kind]) != 1 {
			t.Errorf("%d %s in deploy/dra.yaml, want 1", len(dra[kind]), kind)
		}
	}

	// The examples are namespaced and name no namespace: users create them
	// in theirs. The ServiceAccount admission plugin wants the namespace's
	// default service account, which no controller-manager creates here.
	const ns = "examples"
	_, err = c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = c.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for file, want := range map[string][]string{
		"examples/mesh-by-resource.yaml": {"Pod"},
		"examples/mesh-by-claim.yaml":    {"ResourceClaimTemplate", "Pod"},
	} {
		ex := docs(t, file)
		for kind, ds := range ex {
			for _, doc := range ds {
				switch kind {
				case "Pod":
					create(t, file, doc, &corev1.Pod{}, c.CoreV1().Pods(ns).Create)
				case "ResourceClaimTemplate":
					var o resourcev1.ResourceClaimTemplate
					create(t, file, doc, &o, c.ResourceV1().ResourceClaimTemplates(ns).Create)
					// The API server takes any JSON object as opaque
					// parameters: meshlet's decoder must take these.
					for i, cfg := range o.Spec.Spec.Devices.Config {
						if cfg.Opaque == nil || cfg.Opaque.Driver != "mesh.meshlet.dev" {
							t.Errorf("%s: config[%d] is not opaque config for mesh.meshlet.dev", file, i)
							continue
						}
						if _, err := v1alpha1.Decode(cfg.Opaque.Parameters.Raw, fmt.Sprintf("config[%d].opaque.parameters", i)); err != nil {
							t.Errorf("%s: %v", file, err)
						}
					}
				default:
					t.Fatalf("unexpected kind %q in deploy/%s", kind, file)
				}
			}
		}
		for _, kind := range want {
			if len(ex[kind]) != 1 {
				t.Errorf("%d %s in deploy/%s, want 1", len(ex[kind]), kind, file)
			}
		}
		if len(ex) != len(want) {
			t.Errorf("deploy/%s has kinds %v, want %v", file, keys(ex), want)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
