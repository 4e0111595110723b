package node

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The node runs a pod of the tools image to completion, and cluster DNS
// answers from inside it: the ground every scenario stands on.
func TestNodeRunsAPod(t *testing.T) {
	const ns = "smoke"
	createNamespace(t, ns, nil)
	pod := toolsPod("hello", nil, "echo hello from $(hostname); nslookup kubernetes.default.svc.cluster.local || true")
	if _, err := kube().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPodDone(t, ns, "hello", 40*time.Second)
	out := logs(ns, "hello", "app")
	t.Logf("node up in %v; pod log:\n%s", e2e.started.Round(time.Millisecond), out)
	if got.Status.Phase != corev1.PodSucceeded || !strings.Contains(out, "hello from hello") {
		t.Fatalf("pod %s: %s\n%s", got.Status.Phase, podStateSummary(got), out)
	}
}
