package deploy_test

import (
	"context"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/kube/kubeenv"
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

// TestDeployManifests: deploy/*.yaml pass the API server's validation
// (server-side dry run), in the namespace they name.
func TestDeployManifests(t *testing.T) {
	c, err := kubernetes.NewForConfig(shared.Get(t).Config())
	if err != nil {
		t.Fatal(err)
	}
	// The manifests go into meshlet-system, which the installer creates.
	_, err = c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshlet-system"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
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
			default:
				t.Fatalf("unexpected kind %q in deploy/rbac.yaml", kind)
			}
		}
	}
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
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
			default:
				t.Fatalf("unexpected kind %q in deploy/meshlet.yaml", kind)
			}
		}
	}
	if len(meshlet["DaemonSet"]) == 0 {
		t.Fatal("no DaemonSet in deploy/meshlet.yaml")
	}
}
