package node

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Scenario 6: `helm test` passes (its pod is injected through the webhook
// and takes a lock); `helm upgrade` keeps the webhook's certificate, and
// with injector.tls.rotate=true replaces it (the injectors restart onto
// it, the caBundle trusts both CAs), while opted-in pods keep being
// admitted with the sidecar throughout: no admission fails.
func TestHelmTestAndUpgradeKeepAdmissions(t *testing.T) {
	rel := runHelmTest(t, releaseNS, releaseName)
	for _, h := range rel.Hooks {
		if h.LastRun.Phase != release.HookPhaseSucceeded {
			t.Fatalf("helm test hook %s: %s", h.Name, h.LastRun.Phase)
		}
	}
	ctx := context.Background()
	before := webhookTLS(t)

	adm := startAdmissions(t)
	if _, err := upgrade(ctx, releaseNS, releaseName, valuesFor(true, true, false)); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	kept := webhookTLS(t)
	if !bytes.Equal(kept.cert, before.cert) || !bytes.Equal(kept.caBundle, before.caBundle) {
		t.Error("helm upgrade replaced the webhook's certificate or caBundle")
	}

	injectorsBefore := injectorPods(t)
	rotate := valuesFor(true, true, false)
	rotate["injector"].(map[string]any)["tls"] = map[string]any{"rotate": true}
	began := time.Now()
	if _, err := upgrade(ctx, releaseNS, releaseName, rotate); err != nil {
		t.Fatalf("helm upgrade (rotate): %v", err)
	}
	rotated := webhookTLS(t)
	if bytes.Equal(rotated.cert, before.cert) {
		t.Error("injector.tls.rotate=true kept the certificate")
	}
	if !bytes.Contains(rotated.caBundle, before.ca) || !bytes.Contains(rotated.caBundle, rotated.ca) {
		t.Error("after the rotation the caBundle does not trust both the old CA and the new one")
	}
	for p := range injectorPods(t) {
		if injectorsBefore[p] {
			t.Errorf("injector pod %s was not replaced after the rotation", p)
		}
	}
	time.Sleep(5 * time.Second) // admissions after the injectors restarted
	total, failed := adm.stop()
	t.Logf("two upgrades (the second rotating the certificate, %v with --wait): %d dry-run admissions of opted-in pods, %d failed or not injected",
		time.Since(began).Round(time.Millisecond), total, len(failed))
	if len(failed) > 0 {
		t.Errorf("admissions failed during the upgrades: %v", failed[:min(len(failed), 5)])
	}
	if total < 20 {
		t.Errorf("only %d admissions tried", total)
	}
	runHelmTest(t, releaseNS, releaseName)
}

// tlsState is the injector's certificate Secret and the webhook's caBundle.
type tlsState struct{ cert, ca, caBundle []byte }

func webhookTLS(t *testing.T) tlsState {
	t.Helper()
	ctx := context.Background()
	s, err := kube().CoreV1().Secrets(releaseNS).Get(ctx, releaseName+"-sidelock-injector-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := kube().AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + releaseName})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("webhook configuration: %v", err)
	}
	return tlsState{cert: s.Data["tls.crt"], ca: s.Data["ca.crt"], caBundle: list.Items[0].Webhooks[0].ClientConfig.CABundle}
}

// admissions creates an opted-in pod with server-side dry run every 100ms
// (the API server calls the webhook for a dry run too) and keeps what
// failed or came back without the sidecar.
type admissions struct {
	stopOnce sync.Once
	done     chan struct{}
	finished chan struct{}
	mu       sync.Mutex
	total    int
	failed   []string
}

func startAdmissions(t *testing.T) *admissions {
	a := &admissions{done: make(chan struct{}), finished: make(chan struct{})}
	go a.run()
	t.Cleanup(func() { a.stop() })
	return a
}

func (a *admissions) run() {
	defer close(a.finished)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-a.done:
			return
		case <-tick.C:
		}
		pod := toolsPod(fmt.Sprintf("admit-%d", i), map[string]string{"sidelock.io/inject": "true"}, "true")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := kube().CoreV1().Pods(releaseNS).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		cancel()
		a.mu.Lock()
		a.total++
		switch {
		case err != nil:
			a.failed = append(a.failed, time.Now().Format("15:04:05.000")+": "+err.Error())
		case len(got.Spec.InitContainers) == 0 || got.Spec.InitContainers[0].Name != "sidelock":
			a.failed = append(a.failed, time.Now().Format("15:04:05.000")+": admitted without the sidecar")
		}
		a.mu.Unlock()
	}
}

// stop ends the loop and returns how many were tried and what failed.
func (a *admissions) stop() (int, []string) {
	a.stopOnce.Do(func() { close(a.done) })
	<-a.finished
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total, a.failed
}

// injectorPods names the release's running injector pods.
func injectorPods(t *testing.T) map[string]bool {
	t.Helper()
	list, err := kube().CoreV1().Pods(releaseNS).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/component=injector"})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("injector pods: %v (%d)", err, len(list.Items))
	}
	names := map[string]bool{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names[p.Name] = true
		}
	}
	return names
}
