package e2e

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sidelock/sidelock/internal/injector"
)

// The chart, rendered as `helm install` would into namespace payments.
// Strict decoding and the properties of the manifests are test/deploy's
// business; here they meet a real API server.

const chartDir = "../../charts/sidelock"

type manifest struct {
	source string
	obj    runtime.Object // typed, when client-go knows the kind
	u      map[string]any // as rendered
	gvk    schema.GroupVersionKind
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

func renderChart(t *testing.T, values string) []manifest {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		t.Fatal(err)
	}
	var out []manifest
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range docSeparator.Split(files[name], -1) {
			var u map[string]any
			if err := yaml.Unmarshal([]byte(doc), &u); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(u) == 0 {
				continue
			}
			m := manifest{source: name, u: u}
			apiVersion, _ := u["apiVersion"].(string)
			kind, _ := u["kind"].(string)
			m.gvk = schema.FromAPIVersionAndKind(apiVersion, kind)
			if obj, err := scheme.Scheme.New(m.gvk); err == nil {
				js, _ := yaml.YAMLToJSON([]byte(doc))
				if err := runtime.DecodeInto(scheme.Codecs.UniversalDecoder(), js, obj); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				m.obj = obj
			}
			out = append(out, m)
		}
	}
	return out
}

func find[T runtime.Object](t *testing.T, ms []manifest, match func(T) bool) T {
	t.Helper()
	for _, m := range ms {
		if o, ok := m.obj.(T); ok && (match == nil || match(o)) {
			return o
		}
	}
	var zero T
	t.Fatalf("no %T rendered", zero)
	return zero
}

func webhookConfig(t *testing.T, ms []manifest) *admissionregistrationv1.MutatingWebhookConfiguration {
	return find[*admissionregistrationv1.MutatingWebhookConfiguration](t, ms, nil)
}

// sidecarSpec returns the injector's spec from the chart's ConfigMap and
// the container the named template renders for the same values (the
// helm test pod's, with the injector off).
func sidecarSpec(t *testing.T, ms []manifest) (*injector.Spec, corev1.Container) {
	t.Helper()
	cm := find[*corev1.ConfigMap](t, ms, func(c *corev1.ConfigMap) bool { return c.Data["sidecar.json"] != "" })
	spec, err := injector.ParseSpec([]byte(cm.Data["sidecar.json"]))
	if err != nil {
		t.Fatal(err)
	}
	off := renderChart(t, "injector: {enabled: false}")
	test := find[*corev1.Pod](t, off, func(p *corev1.Pod) bool { return p.Annotations["helm.sh/hook"] == "test" })
	if len(test.Spec.InitContainers) != 1 {
		t.Fatalf("helm test pod without the injector: %d init containers", len(test.Spec.InitContainers))
	}
	return spec, test.Spec.InitContainers[0]
}

// Every manifest the chart renders is accepted by the API server
// (server-side dry run: validation, defaulting and admission, including
// the injector for the helm test pod), over a few sets of values.
// Kinds of CRDs that are not installed here (cert-manager) are listed and
// skipped.
func TestRenderedManifestsServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ensureNamespace(t, namespace)
	r := renderChart(t, "")
	spec, _ := sidecarSpec(t, r)
	srv := startWebhook(t, spec)
	installWebhook(t, webhookConfig(t, r), srv)

	for _, tc := range []struct{ name, values string }{
		{"defaults", ""},
		{"five persistent masters with auth", "redis: {masters: 5, persistence: {enabled: true}, auth: {enabled: true, password: s3cret}}"},
		{"external masters, one injector, Ignore", "redis: {enabled: false, auth: {enabled: false}, externalAddrs: ['redis-a:6379', 'redis-b:6379', 'redis-c:6379']}\ninjector: {replicas: 1, failurePolicy: Ignore}"},
		{"cert-manager", "injector: {certManager: {enabled: true}}"},
		{"no injector", "injector: {enabled: false}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var skipped []string
			for _, m := range renderChart(t, tc.values) {
				obj, ok := m.obj.(client.Object)
				if !ok {
					skipped = append(skipped, m.gvk.Kind)
					continue
				}
				obj = obj.DeepCopyObject().(client.Object)
				if namespaced, err := c.IsObjectNamespaced(obj); err != nil {
					t.Errorf("%s %s: %v", m.gvk.Kind, obj.GetName(), err)
					continue
				} else if namespaced {
					obj.SetNamespace(namespace)
				}
				if err := c.Create(ctx, obj, client.DryRunAll); err != nil {
					t.Errorf("%s %s (%s): %v", m.gvk.Kind, obj.GetName(), m.source, err)
					continue
				}
				if p, ok := obj.(*corev1.Pod); ok && p.Labels[injector.InjectLabel] == "true" {
					if len(p.Spec.InitContainers) != 1 || p.Annotations[injector.StatusAnnotation] != injector.StatusInjected {
						t.Errorf("helm test pod %s not injected: %v", p.Name, containerNames(p.Spec.InitContainers))
					}
				}
			}
			if len(skipped) > 0 {
				t.Logf("not served here (no CRD), skipped: %v", skipped)
			}
			if tc.name != "cert-manager" && len(skipped) > 0 {
				t.Errorf("unexpected kinds without a Go type: %v", skipped)
			}
		})
	}
}
