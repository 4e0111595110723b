package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/health"
	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The second release's pods carry the sidecar themselves, as the chart's
// README shows for pods the injector does not reach: these helpers take it
// from the release's own `helm test` pod (rendered by the chart's
// sidelock.sidecar template) and put it in the scenarios' pods.

// chartTestPod is the release's rendered `helm test` pod.
func chartTestPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	cfg, err := helmConfig(ns)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := action.NewGet(cfg).Run(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range rel.Hooks {
		if h.Kind != "Pod" {
			continue
		}
		var p corev1.Pod
		if err := yaml.Unmarshal([]byte(h.Manifest), &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	t.Fatalf("release %s has no test pod", name)
	return nil
}

// plainPod is a pod of the second release's namespace with the chart's
// sidecar and an app container running script, which reaches the lock API
// on the Unix socket /run/sidelock/api.sock.
func plainPod(t *testing.T, name string, lbl map[string]string, script string) *corev1.Pod {
	t.Helper()
	test := chartTestPod(t, plainNS, plainName)
	app := test.Spec.Containers[0] // the chart's curl container: its mounts and security context
	spec := appSpec(script)
	spec.SecurityContext = test.Spec.SecurityContext
	spec.InitContainers = test.Spec.InitContainers
	spec.Volumes = test.Spec.Volumes
	spec.Containers[0].VolumeMounts = app.VolumeMounts
	spec.Containers[0].SecurityContext = app.SecurityContext
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}, Spec: spec}
}

// readyz is a sidecar's /readyz, read from the host over the pod network:
// the sidecar's own report, and the status it came with.
type readyz struct {
	health.Report
	code int
}

func getReadyz(ctx context.Context, podIP string) (readyz, error) {
	var r readyz
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+podIP+":7421/readyz", nil)
	if err != nil {
		return r, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return r, err
	}
	r.code = resp.StatusCode
	if err := json.Unmarshal(body, &r.Report); err != nil {
		return r, fmt.Errorf("readyz %d: %w: %s", resp.StatusCode, err, body)
	}
	return r, nil
}

// inProbation names the masters /readyz shows in a restart probation.
func (r readyz) inProbation() []string {
	var out []string
	for _, m := range r.Nodes {
		if m.ProbationRemaining > 0 {
			out = append(out, fmt.Sprintf("%s (%v left)", m.Addr, time.Duration(m.ProbationRemaining)))
		}
	}
	return out
}

// endpointReady reports whether the Service's EndpointSlices list podIP as
// ready.
func endpointReady(ctx context.Context, ns, svc, podIP string) (bool, error) {
	list, err := kube().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return false, err
	}
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if a == podIP {
					return ep.Conditions.Ready != nil && *ep.Conditions.Ready, nil
				}
			}
		}
	}
	return false, fmt.Errorf("%s not in the EndpointSlices of %s", podIP, svc)
}

// createService makes a ClusterIP Service selecting lbl.
func createService(t *testing.T, ns, name string, lbl map[string]string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: lbl,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := kube().CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube().CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// createPod creates pod in ns and deletes it at the end of the test.
func createPod(t *testing.T, ns string, pod *corev1.Pod) {
	t.Helper()
	if _, err := kube().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube().CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
}

// scaleMasters sets the replicas of a release's masters.
func scaleMasters(t *testing.T, ns, release string, n int32) {
	t.Helper()
	ctx := context.Background()
	name := release + "-sidelock-redis"
	sc, err := kube().AppsV1().StatefulSets(ns).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Spec.Replicas = n
	if _, err := kube().AppsV1().StatefulSets(ns).UpdateScale(ctx, name, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
