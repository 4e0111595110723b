package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Scenario 2: readiness. With two of three masters stopped the sidecar's
// /readyz turns 503, the kubelet's probe marks the pod NotReady and the
// pod leaves its Service's EndpointSlice; with the masters back (empty:
// this release has no persistence) /readyz shows them in the restart
// probation, then 200, and the pod returns.
func TestReadinessFollowsTheMastersQuorum(t *testing.T) {
	const name, svc = "ready", "ready"
	lbl := map[string]string{"app": name}
	createService(t, plainNS, svc, lbl)
	createPod(t, plainNS, plainPod(t, name, lbl, "exec sleep 3600"))
	pod := waitPodReady(t, plainNS, name, 2*time.Minute)
	ip := pod.Status.PodIP
	eventually(t, 30*time.Second, "the pod's endpoint ready", func(ctx context.Context) error {
		return want(endpointReady(ctx, plainNS, svc, ip))
	})

	stopped := time.Now()
	scaleMasters(t, plainNS, plainName, 1)
	t.Cleanup(func() { scaleMasters(t, plainNS, plainName, 3) })
	eventually(t, time.Minute, "/readyz 503", func(ctx context.Context) error {
		r, err := getReadyz(ctx, ip)
		if err != nil {
			return err
		}
		if r.code != 503 || r.Ready {
			return fmt.Errorf("readyz %d, up %d of quorum %d", r.code, r.Up, r.Quorum)
		}
		return nil
	})
	to503 := time.Since(stopped)
	toNotReady := waitPodCondition(t, name, false, stopped)
	eventually(t, time.Minute, "the endpoint not ready", func(ctx context.Context) error {
		return want(endpointNotReady(ctx, plainNS, svc, ip))
	})
	t.Logf("two masters stopped: /readyz 503 after %v, pod NotReady after %v, endpoint not ready after %v (readiness probe period 5s, 2 failures)",
		to503.Round(time.Millisecond), toNotReady.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))

	restarted := time.Now()
	scaleMasters(t, plainNS, plainName, 3)
	var probation []string
	eventually(t, 2*time.Minute, "/readyz 200 again", func(ctx context.Context) error {
		r, err := getReadyz(ctx, ip)
		if err != nil {
			return err
		}
		if p := r.inProbation(); len(p) > 0 && probation == nil {
			probation = p
			t.Logf("+%v: /readyz %d, in probation: %s", time.Since(restarted).Round(time.Millisecond), r.code, strings.Join(p, ", "))
		}
		if r.code != 200 {
			return fmt.Errorf("readyz %d, up %d of quorum %d, probation %v", r.code, r.Up, r.Quorum, r.inProbation())
		}
		return nil
	})
	back200 := time.Since(restarted)
	if probation == nil {
		t.Error("the restarted masters (no persistence) were never shown in the restart probation")
	}
	waitPodCondition(t, name, true, restarted)
	eventually(t, time.Minute, "the endpoint ready again", func(ctx context.Context) error {
		return want(endpointReady(ctx, plainNS, svc, ip))
	})
	t.Logf("masters back: /readyz 200 after %v (restart delay %ds, then the probation), back in the EndpointSlice after %v",
		back200.Round(time.Millisecond), restartDelaySeconds, time.Since(restarted).Round(time.Millisecond))
}

// want turns a (condition, error) answer into an error for eventually.
func want(ok bool, err error) error {
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("not yet")
	}
	return nil
}

func endpointNotReady(ctx context.Context, ns, svc, ip string) (bool, error) {
	ready, err := endpointReady(ctx, ns, svc, ip)
	return !ready, err
}

// waitPodCondition waits for the pod's Ready condition to be ready and
// returns how long after since it was reached.
func waitPodCondition(t *testing.T, name string, ready bool, since time.Time) time.Duration {
	t.Helper()
	waitPod(t, plainNS, name, 2*time.Minute, fmt.Sprintf("Ready=%v", ready), func(p *corev1.Pod) bool { return podReady(p) == ready })
	return time.Since(since)
}
