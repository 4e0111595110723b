package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Scenario 1: an opted-in Deployment is admitted through the webhook via
// its Service (the API server reaches the injector's ClusterIP through
// kube-proxy's rules, with the chart's own certificate); the kubelet starts
// the native sidecar and waits for its startup probe before the app; the
// app's very first request takes a lock over localhost.
func TestOptedInPodGetsTheSidecarBeforeTheApp(t *testing.T) {
	if e2e.cluster.KubeProxy != "" {
		t.Fatalf("kube-proxy does not run, so the API server cannot reach a ClusterIP: %s", e2e.cluster.KubeProxy)
	}
	ctx := context.Background()
	checkWebhookUsesService(t, ctx)

	// The app's first instructions: the sidecar's readiness, then an
	// acquire with no retry and no wait, then a release.
	script := `echo "readyz-at-start: $(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:7421/readyz)"
body=$(curl -sS -X POST "` + lockAPI + `/locks/scenario1?ttl=30s&owner=$HOSTNAME")
echo "acquired: $body"
token=$(echo "$body" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
echo "released: $(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Lock-Token: $token" "` + lockAPI + `/locks/scenario1")"
exec sleep 3600`
	deploy(t, appDeployment("start", 1, script))
	pod := readyPods(t, "start", 1, 2*time.Minute)[0]

	if len(pod.Spec.InitContainers) == 0 || pod.Spec.InitContainers[0].Name != "sidelock" ||
		pod.Spec.InitContainers[0].RestartPolicy == nil || *pod.Spec.InitContainers[0].RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("the pod was not given the native sidecar first among its init containers: %+v", pod.Spec.InitContainers)
	}
	side := containerStatus(pod.Status.InitContainerStatuses, "sidelock")
	app := containerStatus(pod.Status.ContainerStatuses, "app")
	if side == nil || app == nil || side.State.Running == nil || app.State.Running == nil {
		t.Fatalf("containers not both running: %s", podStateSummary(&pod))
	}
	if app.State.Running.StartedAt.Before(&side.State.Running.StartedAt) {
		t.Errorf("the app started at %v, before the sidecar (%v)", app.State.Running.StartedAt, side.State.Running.StartedAt)
	}
	var out []string
	eventually(t, 30*time.Second, "the app's log", func(context.Context) error {
		out = logLines(releaseNS, pod.Name, "app", "")
		if len(out) < 3 {
			return errLog(out)
		}
		return nil
	})
	t.Logf("app log:\n%s", strings.Join(out, "\n"))
	if out[0] != "readyz-at-start: 200" {
		t.Errorf("the sidecar was not ready when the app started: %q", out[0])
	}
	l, err := parseLease(strings.TrimPrefix(out[1], "acquired: "))
	if err != nil || l.Token == "" || l.Fence == 0 || l.Owner != pod.Name || time.Until(l.ValidUntil) > 30*time.Second {
		t.Errorf("the app's first acquire did not answer a lease: %q (%v)", out[1], err)
	}
	if out[2] != "released: 204" {
		t.Errorf("release: %q", out[2])
	}
	if l.Token != "" && strings.Contains(logs(releaseNS, pod.Name, "sidelock"), l.Token) {
		t.Error("the sidecar logged the lock token")
	}
	t.Logf("sidecar started %v, app started %v; the app's first acquire got fence %d",
		side.State.Running.StartedAt.Format(time.RFC3339), app.State.Running.StartedAt.Format(time.RFC3339), l.Fence)
}

// checkWebhookUsesService asserts that the chart's webhook points at the
// injector's Service, which has a ClusterIP with ready endpoints.
func checkWebhookUsesService(t *testing.T, ctx context.Context) {
	t.Helper()
	list, err := kube().AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + releaseName})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the release's webhook configuration: %v (%d found)", err, len(list.Items))
	}
	for _, wh := range list.Items[0].Webhooks {
		svc := wh.ClientConfig.Service
		if svc == nil || wh.ClientConfig.URL != nil {
			t.Fatalf("webhook %s is not called through a Service: %+v", wh.Name, wh.ClientConfig)
		}
		s, err := kube().CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone {
			t.Fatalf("Service %s has no ClusterIP", s.Name)
		}
	}
}

// The Unix socket: the second release serves the lock API on
// /run/sidelock/api.sock; its `helm test` pod includes the sidecar from the
// chart's template (no injector there) and takes a lock through the socket.
func TestLockOverTheUnixSocket(t *testing.T) {
	rel := runHelmTest(t, plainNS, plainName)
	for _, h := range rel.Hooks {
		if h.LastRun.Phase != release.HookPhaseSucceeded {
			t.Fatalf("helm test hook %s: %s", h.Name, h.LastRun.Phase)
		}
	}
}

// runHelmTest runs `helm test` and logs its pods' output.
func runHelmTest(t *testing.T, ns, name string) *release.Release {
	t.Helper()
	cfg, err := helmConfig(ns)
	if err != nil {
		t.Fatal(err)
	}
	rt := action.NewReleaseTesting(cfg)
	rt.Namespace, rt.Timeout = ns, 3*time.Minute
	began := time.Now()
	rel, err := rt.Run(name)
	var b strings.Builder
	if rel != nil {
		_ = rt.GetPodLogs(&b, rel)
	}
	t.Logf("helm test %s: %v in %v; logs:\n%s", name, err, time.Since(began).Round(time.Millisecond), b.String())
	if err != nil {
		t.Fatalf("helm test %s: %v", name, err)
	}
	return rel
}

type errLog []string

func (e errLog) Error() string { return "log so far: " + strings.Join(e, " | ") }
