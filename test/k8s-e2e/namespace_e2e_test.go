package e2e

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidelock/sidelock/internal/injector"
)

// Namespace-level opt-in, against the real API server: with the chart's two
// webhook entries, every pod created in a namespace labelled
// sidelock-injection: enabled gets the sidecar (and the label that the
// masters' NetworkPolicy and the PodMonitor select), unless it opts out
// with sidelock.io/inject: "false"; a pod elsewhere without the pod label
// is left alone, and the pod label keeps working there. Each pod reaches
// the injector once (the entries are disjoint).
func TestNamespaceOptInAgainstAPIServer(t *testing.T) {
	ctx := context.Background()
	r := renderChart(t, "")
	spec, want := sidecarSpec(t, r)
	ensureNamespace(t, namespace)
	const optedIn, elsewhere = "ns-opted-in", "ns-elsewhere"
	ensureLabelledNamespace(t, optedIn, map[string]string{"sidelock-injection": "enabled"})
	ensureNamespace(t, elsewhere)
	srv := startWebhook(t, spec)
	installWebhook(t, webhookConfig(t, r), srv)

	for _, tc := range []struct {
		ns, pod  string
		labels   map[string]string
		injected bool
	}{
		{optedIn, "plain", map[string]string{"app": "web"}, true},
		{optedIn, "also-labelled", map[string]string{"app": "web", injector.InjectLabel: "true"}, true},
		{optedIn, "opted-out", map[string]string{"app": "web", injector.InjectLabel: "false"}, false},
		{elsewhere, "plain-elsewhere", map[string]string{"app": "web"}, false},
		{elsewhere, "labelled-elsewhere", map[string]string{"app": "web", injector.InjectLabel: "true"}, true},
	} {
		got, err := clientset.CoreV1().Pods(tc.ns).Create(ctx, testPod(tc.pod, tc.labels, nil), metav1.CreateOptions{})
		if err != nil {
			t.Errorf("%s/%s: %v", tc.ns, tc.pod, err)
			continue
		}
		names := containerNames(got.Spec.InitContainers)
		if tc.injected {
			if !slices.Equal(names, []string{want.Name, "migrate"}) {
				t.Errorf("%s/%s: init containers %v, want the sidecar first", tc.ns, tc.pod, names)
				continue
			}
			checkStoredSidecar(t, got.Spec.InitContainers[0], want)
			if got.Labels[injector.InjectLabel] != "true" || got.Labels["app"] != "web" {
				t.Errorf("%s/%s: labels %v, want app kept and %s: \"true\"", tc.ns, tc.pod, got.Labels, injector.InjectLabel)
			}
			if n := srv.callsFor(tc.pod); n != 1 {
				t.Errorf("%s/%s: injector called %d times, want once", tc.ns, tc.pod, n)
			}
		} else {
			if !slices.Equal(names, []string{"migrate"}) {
				t.Errorf("%s/%s: init containers %v, want it untouched", tc.ns, tc.pod, names)
			}
			if got.Labels[injector.InjectLabel] != tc.labels[injector.InjectLabel] {
				t.Errorf("%s/%s: labels %v changed", tc.ns, tc.pod, got.Labels)
			}
		}
	}
}

func ensureLabelledNamespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	_, err := clientset.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
