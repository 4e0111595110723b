package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The application side of the scenarios: Deployments of the tools image
// whose pods opt in to the sidecar and talk to it with curl, as any app
// without a client library would.

// lockAPI is the sidecar's lock API as the app container sees it.
const lockAPI = "http://127.0.0.1:7420"

// appDeployment is a Deployment of replicas pods labelled for injection,
// each running script in its "app" container.
func appDeployment(name string, replicas int32, script string) *appsv1.Deployment {
	lbl := map[string]string{"app": name}
	podLabels := map[string]string{"app": name, "sidelock.io/inject": "true"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec:       appSpec(script),
			},
		},
	}
}

// deploy creates d in the release namespace and removes it at the end.
func deploy(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube().AppsV1().Deployments(releaseNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube().AppsV1().Deployments(releaseNS).Delete(context.Background(), d.Name, metav1.DeleteOptions{})
	})
}

// podsOf lists the pods of a Deployment (by its app label).
func podsOf(ctx context.Context, app string) ([]corev1.Pod, error) {
	sel := labels.SelectorFromSet(labels.Set{"app": app}).String()
	list, err := kube().CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// readyPods waits for n ready pods of app and returns them.
func readyPods(t *testing.T, app string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var ready []corev1.Pod
	eventually(t, timeout, fmt.Sprintf("%d ready pods of %s", n, app), func(ctx context.Context) error {
		pods, err := podsOf(ctx, app)
		if err != nil {
			return err
		}
		ready = ready[:0]
		var states []string
		for _, p := range pods {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready = append(ready, p)
			}
			states = append(states, p.Name+": "+podStateSummary(&p))
		}
		if len(ready) != n {
			return fmt.Errorf("%d ready: %s", len(ready), strings.Join(states, " | "))
		}
		return nil
	})
	return ready
}

// logLines are the lines of a container's log that start with prefix,
// without it.
func logLines(ns, pod, container, prefix string) []string {
	var out []string
	for _, l := range strings.Split(logs(ns, pod, container), "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

// parseLease decodes a lease answer the app printed, into the Go client's
// type for it.
func parseLease(s string) (client.Lease, error) {
	var l client.Lease
	err := json.Unmarshal([]byte(s), &l)
	return l, err
}

func containerStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}
