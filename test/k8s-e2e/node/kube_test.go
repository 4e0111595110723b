package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
)

// Helpers over the API server shared by the scenarios.

func kube() *kubernetes.Clientset { return e2e.cluster.Client }

// eventually polls check every 250ms until it answers nil or timeout
// passes; it returns how long it took.
func eventually(t *testing.T, timeout time.Duration, what string, check func(ctx context.Context) error) time.Duration {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			return time.Since(began)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v: %v", what, timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// createNamespace creates ns (kept: the cluster is thrown away at the end).
func createNamespace(t *testing.T, ns string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	_, err := kube().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Pods are refused until the controller manager made its ServiceAccount.
	eventually(t, time.Minute, "ServiceAccount "+ns+"/default", func(ctx context.Context) error {
		_, err := kube().CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// waitPod waits until ok holds for the pod and returns it.
func waitPod(t *testing.T, ns, name string, timeout time.Duration, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, timeout, "pod "+ns+"/"+name+" "+what, func(ctx context.Context) error {
		p, err := kube().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		if !ok(p) {
			return fmt.Errorf("phase %s: %s", p.Status.Phase, podStateSummary(p))
		}
		return nil
	})
	return pod
}

// waitPodReady waits until the pod is Ready.
func waitPodReady(t *testing.T, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	return waitPod(t, ns, name, timeout, "ready", podReady)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podStateSummary says where each container of p is, for failure messages.
func podStateSummary(p *corev1.Pod) string {
	var parts []string
	all := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, s := range all {
		st := "?"
		switch {
		case s.State.Running != nil:
			st = "running"
		case s.State.Waiting != nil:
			st = "waiting " + s.State.Waiting.Reason + " " + s.State.Waiting.Message
		case s.State.Terminated != nil:
			st = fmt.Sprintf("terminated %s exit %d", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
		}
		parts = append(parts, fmt.Sprintf("%s %s ready=%v restarts=%d", s.Name, st, s.Ready, s.RestartCount))
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// waitPodDone waits until the pod Succeeded or Failed and returns it.
func waitPodDone(t *testing.T, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	return waitPod(t, ns, name, timeout, "done", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
}

// logs is a container's log, through the API server and the kubelet.
func logs(ns, pod, container string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := kube().CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).Stream(ctx)
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	defer rc.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, rc)
	return b.String()
}

// appSpec is the spec of every app pod of the scenarios: one "app"
// container of the tools image running script, no service account token,
// 10s to stop.
func appSpec(script string) corev1.PodSpec {
	return corev1.PodSpec{
		AutomountServiceAccountToken:  new(bool),
		EnableServiceLinks:            new(bool),
		TerminationGracePeriodSeconds: ptr.To[int64](10),
		Containers: []corev1.Container{{
			Name:            "app",
			Image:           e2e.tools,
			ImagePullPolicy: corev1.PullNever,
			Command:         []string{"sh", "-c", script},
		}},
	}
}

// toolsPod is a pod of the tools image running script, once.
func toolsPod(name string, labels map[string]string, script string) *corev1.Pod {
	spec := appSpec(script)
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: spec}
}

// execIn runs cmd in a container through the API server and the kubelet
// (kubectl exec), returning its stdout; a non-zero exit is an error.
func execIn(ctx context.Context, ns, pod, container string, cmd ...string) (string, error) {
	req := kube().CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(e2e.cluster.Config, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("exec %v in %s/%s: %w: %s", cmd, pod, container, err, stderr.String())
	}
	return stdout.String(), nil
}

// curlIn runs curl in a pod's app container and returns the HTTP status
// and the body: -w appends the status after the body's last line.
func curlIn(ctx context.Context, ns, pod string, args ...string) (int, string, error) {
	out, err := execIn(ctx, ns, pod, "app", append([]string{"curl", "-sS", "-w", "\n%{http_code}"}, args...)...)
	if err != nil {
		return 0, out, err
	}
	i := strings.LastIndex(out, "\n")
	var status int
	_, err = fmt.Sscanf(out[i+1:], "%d", &status)
	return status, strings.TrimSpace(out[:max(i, 0)]), err
}
