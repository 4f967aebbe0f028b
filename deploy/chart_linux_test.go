package deploy_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/meshlet/meshlet/internal/helmchart"
	"github.com/meshlet/meshlet/internal/privtest"
)

// render is the chart rendered by helm template with args, decoded
// strictly.
func render(t *testing.T, args ...string) []helmchart.Object {
	t.Helper()
	dir := privtest.RequireEnv(t, helmchart.HelmEnv, "the directory hack/install-helm.sh prints; `make test` sets it")
	h := helmchart.Helm{Bin: filepath.Join(dir, "helm"), Root: ".."}
	out, err := h.Template(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmchart.Decode(out)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	return objs
}

// TestChartDryRun: what the chart renders with each platform, for an older
// cluster, hardened, and with the optional objects and other values, passes the API server's validation
// (server-side dry run, strict field validation) in the release's
// namespace. The ServiceMonitor and the PrometheusRule are left out: this
// API server has no Prometheus Operator CRDs (internal/helmchart.Decode
// decodes their fields strictly).
func TestChartDryRun(t *testing.T) {
	cfg := shared.Get(t).Config()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{helmchart.Namespace, "mesh"} {
		_, err := client.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Create(ctx,
			&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	cases := [][]string{
		{"--set", "nriCheck.enabled=true"},
		{"--set", "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,dashboards.enabled=true"},
		{"--kube-version", helmchart.OlderCluster},
		{"--set", "platform=k3s,dra.enabled=false,paths.criSocket=/var/run/crio/crio.sock"},
		{"--set", "namespace.create=true,resourceQuota.enabled=true,serviceAccount.annotations.example\\.com/role=mesh",
			"--set", "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef,updateStrategy.type=OnDelete",
			"--set", "securityContext.appArmorProfile.type=RuntimeDefault,securityContext.seLinuxOptions.type=spc_t"},
		{"--namespace", "mesh", "--set", "fullnameOverride=node-agent,dra.driverName=mesh.example.com,namespace.create=true,metrics.serviceMonitor.enabled=true",
			"--set", "updateStrategy.rollingUpdate.maxSurge=0,updateStrategy.rollingUpdate.maxUnavailable=10%,health.address=0.0.0.0:9880,config.mode=cni,config.excluded-namespaces={kube-system,istio-system}",
			"--set", "securityContext.privileged=false,securityContext.capabilities.add={NET_ADMIN,SYS_ADMIN}"},
	}
	for _, p := range helmchart.Platforms {
		cases = append(cases, []string{"--set", "platform=" + p})
	}
	for _, args := range cases {
		objs := render(t, args...)
		for _, o := range objs {
			if o.Monitor != nil || o.Rule != nil {
				continue
			}
			var u unstructured.Unstructured
			if err := yaml.Unmarshal(o.Raw, &u.Object); err != nil {
				t.Fatal(err)
			}
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("%v: %s: %v", args, gvk, err)
			}
			var ri dynamic.ResourceInterface = client.Resource(m.Resource)
			if o.Namespace != "" {
				ri = client.Resource(m.Resource).Namespace(o.Namespace)
			}
			_, err = ri.Create(ctx, &u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
			// The release namespace exists (it is where the release
			// goes); the API server validated the object before finding so.
			if err != nil && !(o.Kind == "Namespace" && apierrors.IsAlreadyExists(err)) {
				t.Errorf("%v: %s %s: %v", args, o.Kind, o.Name, err)
			}
		}
	}
}
