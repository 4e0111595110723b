package node

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// holderScript holds lock name for as long as the app lives: a held
// stream (hold=true) ends, and the sidecar releases the lock, when the
// connection closes. sh as PID 1 ignores SIGTERM unless it traps it.
func holderScript(name string) string {
	return `trap 'echo "app: SIGTERM"; exit 0' TERM
curl -sSN -X POST "` + lockAPI + `/locks/` + name + `?hold=true&owner=$HOSTNAME" &
wait $!`
}

// waiterScript waits for every lock of names at once, printing each grant as "acquired: <lease>".
func waiterScript(names ...string) string {
	var b strings.Builder
	b.WriteString("trap 'exit 0' TERM\n")
	for _, n := range names {
		b.WriteString(`(echo "acquired: $(curl -sS -X POST "` + lockAPI + `/locks/` + n + `?wait=2m&ttl=30s&owner=$HOSTNAME")") &` + "\n")
	}
	b.WriteString("sleep 3600 & wait $!\n")
	return b.String()
}

// Scenario 3: termination. Deleting a pod whose app holds a lock stops the
// app first: its held stream closes and the sidecar, still running,
// releases the lock, so another pod gets it at once; the sidecar stops
// after, with no lease left to end. A pod whose containers are killed
// outright frees its lock within one key TTL (the keys lapse).
func TestTerminationReleasesBeforeTheSidecarStops(t *testing.T) {
	ctx := context.Background()
	inject := map[string]string{"sidelock.io/inject": "true"}
	createPod(t, releaseNS, toolsPod("holder-graceful", inject, holderScript("term-graceful")))
	createPod(t, releaseNS, toolsPod("holder-killed", inject, holderScript("term-killed")))
	holdGraceful := waitHeld(t, "holder-graceful")
	waitHeld(t, "holder-killed")
	createPod(t, releaseNS, toolsPod("term-waiter", inject, waiterScript("term-graceful", "term-killed")))
	waitPodReady(t, releaseNS, "term-waiter", 2*time.Minute)

	// Graceful: the app's SIGTERM first, the sidecar's after.
	sidecarLog := follow(t, releaseNS, "holder-graceful", "sidelock")
	deleted := time.Now()
	if err := kube().CoreV1().Pods(releaseNS).Delete(ctx, "holder-graceful", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next := waitGrant(t, "term-graceful")
	lines := sidecarLog()
	stop, ended := shutdownLine(lines)
	handOff := next.AcquiredAt.Sub(deleted)
	t.Logf("graceful delete: the waiting pod acquired %v after the delete (fence %d after %d); the holder's sidecar logged \"shutting down\" %v after the delete, leases_ended=%v",
		handOff.Round(time.Millisecond), next.Fence, holdGraceful.Fence, stop.Sub(deleted).Round(time.Millisecond), ended)
	switch {
	case stop.IsZero():
		t.Errorf("the holder's sidecar never logged its shutdown; its log:\n%s", strings.Join(lines, "\n"))
	case !next.AcquiredAt.Before(stop):
		t.Errorf("the lock passed on only at %v, after the holder's sidecar began shutting down at %v: the app did not stop first", next.AcquiredAt, stop)
	case ended != 0:
		t.Errorf("the sidecar ended %v leases at shutdown: the app's lock was still held when the sidecar stopped", ended)
	}
	if handOff > keyTTL {
		t.Errorf("the lock took %v to pass on, more than one key TTL (%v)", handOff, keyTTL)
	}
	if next.Fence <= holdGraceful.Fence {
		t.Errorf("fence %d granted after fence %d", next.Fence, holdGraceful.Fence)
	}

	// Killed: no one releases; the keys lapse within one key TTL.
	killed := killPod(t, "holder-killed")
	next = waitGrant(t, "term-killed")
	freed := next.AcquiredAt.Sub(killed)
	t.Logf("containers killed (SIGKILL, sidecar included): the waiting pod acquired %v later (key TTL %v)", freed.Round(time.Millisecond), keyTTL)
	if freed > keyTTL+time.Second {
		t.Errorf("a dead pod's lock was held %v, beyond one key TTL (%v) and a second for the waiter's retry", freed, keyTTL)
	}
}

// waitHeld waits for a holder pod's "acquired" event and returns its lease.
func waitHeld(t *testing.T, pod string) client.Lease {
	t.Helper()
	var g client.Lease
	eventually(t, 2*time.Minute, pod+" holding its lock", func(context.Context) error {
		for _, l := range logLines(releaseNS, pod, "app", "data: ") {
			var err error
			if g, err = parseLease(l); err == nil && g.Token != "" {
				return nil
			}
		}
		return errLog(logLines(releaseNS, pod, "app", ""))
	})
	return g
}

// waitGrant waits for the waiter pod's grant of name.
func waitGrant(t *testing.T, name string) client.Lease {
	t.Helper()
	var g client.Lease
	eventually(t, time.Minute, "term-waiter granted "+name, func(context.Context) error {
		for _, l := range logLines(releaseNS, "term-waiter", "app", "acquired: ") {
			var err error
			if g, err = parseLease(l); err == nil && g.Name == name && g.Token != "" {
				return nil
			}
		}
		return errLog(logLines(releaseNS, "term-waiter", "app", ""))
	})
	return g
}

// follow streams a container's log from now on; the function it returns
// waits for the stream to end (the container stopped) and returns its lines.
func follow(t *testing.T, ns, pod, container string) func() []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	rc, err := kube().CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		lines []string
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(rc)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); rc.Close(); <-done })
	return func() []string {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Errorf("the %s container of %s still logging a minute on", container, pod)
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}

// shutdownLine finds the sidecar's "shutting down" record: when, and how
// many leases it still had to end.
func shutdownLine(lines []string) (time.Time, int) {
	for _, l := range lines {
		var rec struct {
			Time   time.Time `json:"time"`
			Msg    string    `json:"msg"`
			Leases int       `json:"leases_ended"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "shutting down" {
			return rec.Time, rec.Leases
		}
	}
	return time.Time{}, -1
}

// killPod kills every container of a pod with SIGKILL through containerd,
// the sidecar first (so it cannot release when the app's stream closes),
// as a crashed node would, and returns when.
func killPod(t *testing.T, name string) time.Time {
	t.Helper()
	p, err := kube().CoreV1().Pods(releaseNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		ids = append(ids, strings.TrimPrefix(s.ContainerID, "containerd://"))
	}
	t.Logf("killing %s: %s %v", name, podStateSummary(p), ids)
	at := time.Now()
	if err := e2e.cluster.KillContainers(context.Background(), ids...); err != nil {
		t.Fatal(err)
	}
	return at
}
