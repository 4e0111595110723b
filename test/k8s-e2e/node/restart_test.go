package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Scenario 4a: the masters of the first release keep their data on
// PersistentVolumes (appendonly, fsync always). Restarting each in turn
// keeps fence order (every grant's fence above every earlier one), the
// sidecar takes each back at once (durable: no probation), and grants go
// on while one is away.
func TestPersistentMasterRestartsKeepFenceOrder(t *testing.T) {
	inject := map[string]string{"sidelock.io/inject": "true"}
	createPod(t, releaseNS, toolsPod("fencer", inject, "exec sleep 3600"))
	pod := waitPodReady(t, releaseNS, "fencer", 2*time.Minute)

	var fences []int64
	take := func(when string) {
		t.Helper()
		l := acquireRelease(t, releaseNS, "fencer", lockAPI, "s4")
		if n := len(fences); n > 0 && l.Fence <= fences[n-1] {
			t.Errorf("%s: fence %d granted after fence %d", when, l.Fence, fences[n-1])
		}
		fences = append(fences, l.Fence)
	}
	take("before the restarts")
	for i := range 3 {
		master := fmt.Sprintf("%s-sidelock-redis-%d", releaseName, i)
		old := deleteMaster(t, releaseNS, master)
		take(master + " away")
		back := waitMasterBack(t, releaseNS, master, old)
		eventually(t, time.Minute, master+" eligible again", func(ctx context.Context) error {
			r, err := getReadyz(ctx, pod.Status.PodIP)
			if err != nil {
				return err
			}
			if r.code != 200 || r.Eligible != len(r.Nodes) {
				return fmt.Errorf("readyz %d: %d of %d eligible, probation %v", r.code, r.Eligible, len(r.Nodes), r.inProbation())
			}
			if p := r.inProbation(); len(p) > 0 {
				t.Errorf("a persistent master was put in probation: %v", p)
			}
			return nil
		})
		take(master + " back")
		t.Logf("%s restarted: back after %v (restart delay %ds), eligible with no probation seen", master, back.Round(time.Millisecond), restartDelaySeconds)
	}
	t.Logf("fences in grant order: %v", fences)
	// The data the masters kept is on the volumes.
	for i := range 3 {
		dir := filepath.Join(e2e.cluster.Dir, "volumes", fmt.Sprint(i))
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if !strings.Contains(strings.Join(names, " "), "appendonly") {
			t.Errorf("volume %d holds no append-only file: %v", i, names)
		}
	}
}

// Scenario 4b: the second release's masters have no persistence. Two of
// three restarted at once come back empty; while the restart guard keeps
// them in probation an acquire answers 503 no_quorum though all three
// masters answer, and once it has passed grants resume with a higher fence.
func TestRestartGuardKeepsEmptyMastersOutOfQuorums(t *testing.T) {
	ctx := context.Background()
	createPod(t, plainNS, plainPod(t, "guard", nil, "exec sleep 3600"))
	pod := waitPodReady(t, plainNS, "guard", 2*time.Minute)
	const api = "http://sidelock" // over the socket; the host is ignored
	before := acquireRelease(t, plainNS, "guard", api, "s4b", "--unix-socket", "/run/sidelock/api.sock")

	restarted := time.Now()
	for _, i := range []int{0, 2} {
		deleteMaster(t, plainNS, fmt.Sprintf("%s-sidelock-redis-%d", plainName, i))
	}
	var seen readyz
	eventually(t, 2*time.Minute, "both restarted masters up and in probation", func(ctx context.Context) error {
		r, err := getReadyz(ctx, pod.Status.PodIP)
		if err != nil {
			return err
		}
		seen = r
		if r.Up != len(r.Nodes) || len(r.inProbation()) != 2 {
			return fmt.Errorf("up %d, probation %v", r.Up, r.inProbation())
		}
		return nil
	})
	code, body, err := curlIn(ctx, plainNS, "guard", "--unix-socket", "/run/sidelock/api.sock", "-X", "POST", api+"/locks/s4b?ttl=5s")
	after, rerr := getReadyz(ctx, pod.Status.PodIP)
	if err != nil || rerr != nil {
		t.Fatal(err, rerr)
	}
	t.Logf("+%v: all %d masters up, %d eligible, in probation %v; acquire answered %d %s",
		time.Since(restarted).Round(time.Millisecond), seen.Up, seen.Eligible, seen.inProbation(), code, body)
	if len(after.inProbation()) < 2 {
		t.Fatalf("the probation ended during the acquire (readyz then: %v): inconclusive", after.inProbation())
	}
	if code != 503 || !strings.Contains(body, "no_quorum") {
		t.Errorf("an acquire while two empty masters were in probation answered %d %s, not 503 no_quorum", code, body)
	}
	eventually(t, time.Minute, "the probation over", func(ctx context.Context) error {
		r, err := getReadyz(ctx, pod.Status.PodIP)
		if err != nil {
			return err
		}
		if r.code != 200 {
			return fmt.Errorf("readyz %d, probation %v", r.code, r.inProbation())
		}
		return nil
	})
	next := acquireRelease(t, plainNS, "guard", api, "s4b", "--unix-socket", "/run/sidelock/api.sock")
	t.Logf("+%v: probation over, fence %d after %d", time.Since(restarted).Round(time.Millisecond), next.Fence, before.Fence)
	if next.Fence <= before.Fence {
		t.Errorf("fence %d granted after %d", next.Fence, before.Fence)
	}
}

// acquireRelease takes lock name through the pod's sidecar and releases it.
func acquireRelease(t *testing.T, ns, pod, api, name string, curlArgs ...string) client.Lease {
	t.Helper()
	ctx := context.Background()
	code, body, err := curlIn(ctx, ns, pod, append(curlArgs, "-X", "POST", api+"/locks/"+name+"?ttl=10s&wait=30s")...)
	if err != nil || code != 200 {
		t.Fatalf("acquire %s: %d %s %v", name, code, body, err)
	}
	l, err := parseLease(body)
	if err != nil {
		t.Fatal(err)
	}
	code, body, err = curlIn(ctx, ns, pod, append(curlArgs, "-X", "DELETE", "-H", "Lock-Token: "+l.Token, api+"/locks/"+name)...)
	if err != nil || code != 204 {
		t.Fatalf("release %s: %d %s %v", name, code, body, err)
	}
	return l
}

// deleteMaster deletes a master pod (its StatefulSet makes it again) and
// returns the old pod's UID.
func deleteMaster(t *testing.T, ns, name string) types.UID {
	t.Helper()
	ctx := context.Background()
	p, err := kube().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kube().CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return p.UID
}

// waitMasterBack waits until the master pod was made again and is Ready,
// returning how long that took.
func waitMasterBack(t *testing.T, ns, name string, old types.UID) time.Duration {
	t.Helper()
	return eventually(t, 2*time.Minute, name+" back", func(ctx context.Context) error {
		p, err := kube().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == old || !podReady(p) {
			return fmt.Errorf("not yet: %s", podStateSummary(p))
		}
		return nil
	})
}
