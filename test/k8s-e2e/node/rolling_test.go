package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sidelock/sidelock/pkg/client"
	"github.com/sidelock/sidelock/test/leasecheck"
)

// contenderScript takes lock s5 in a loop, holds it 200ms and releases it,
// recording each grant and each release in /records/$HOSTNAME (a hostPath,
// so the records outlive the pods the rollout deletes). Times are the wall
// clock in microseconds from busybox's adjtimex (its date has no
// sub-second field; /proc/uptime's 10ms steps were too coarse: a release
// and the next grant can fall in one step).
//
// A SIGTERM only sets stop: the loop then ends its round (a pending
// acquire is cut short, a held lock released) and exits. A trap that
// released by itself ran between release's DELETE and its "token=" (ash
// runs traps between commands) and recorded a second release of the
// token after the lock was free: a false broken promise of 1ms once.
const contenderScript = `API=` + lockAPI + `
now() { adjtimex | awk '/tv_sec/ {s = $2} /tv_usec/ {u = $2} END {printf "%d.%06d\n", s, u}'; }
rec() { echo "$*" >> /records/$HOSTNAME; echo "$*"; }
stop=
trap 'stop=1' TERM
while [ -z "$stop" ]; do
  rm -f /tmp/body
  curl -sS -o /tmp/body -X POST "$API/locks/s5?wait=30s&ttl=5s&owner=$HOSTNAME" & acquire=$!
  wait $acquire
  if [ -n "$stop" ]; then kill $acquire 2>/dev/null; wait $acquire; fi
  got=$(now)
  token=$(sed -n 's/.*"token":"\([^"]*\)".*/\1/p' /tmp/body 2>/dev/null)
  [ -n "$token" ] && rec "granted $got $(cat /tmp/body)"
  [ -n "$stop" ] || { sleep 0.2 & wait $!; } # hold it, or pause after a refusal
  [ -n "$token" ] || continue
  rec "released $(now) $token"
  curl -s -o /dev/null -X DELETE -H "Lock-Token: $token" $API/locks/s5
done`

// Scenario 5: a rolling update of three replicas that contend for one
// lock. Every grant any pod received, old or new, is judged by the chaos
// suite's rules (test/leasecheck): no grant while another's published
// valid_until stood and it had not begun to release, no overlapping
// sections, fences in order.
func TestRollingUpdateNeverTwoHolders(t *testing.T) {
	ctx := context.Background()
	records := filepath.Join(e2e.cluster.Dir, "records")
	if err := os.MkdirAll(records, 0o777); err != nil {
		t.Fatal(err)
	}
	d := appDeployment("contend", 3, contenderScript)
	spec := &d.Spec.Template.Spec
	hostPathType := corev1.HostPathDirectory
	spec.Volumes = []corev1.Volume{{Name: "records", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: records, Type: &hostPathType}}}}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "records", MountPath: "/records"}}
	deploy(t, d)
	readyPods(t, "contend", 3, 2*time.Minute)
	time.Sleep(3 * time.Second) // contention before the rollout

	began := time.Now()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"e2e/rollout":%q}}}}}`, began.Format(time.RFC3339Nano))
	if _, err := kube().AppsV1().Deployments(releaseNS).Patch(ctx, "contend", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the rollout done", func(ctx context.Context) error {
		dep, err := kube().AppsV1().Deployments(releaseNS).Get(ctx, "contend", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := dep.Status
		if st.ObservedGeneration < dep.Generation || st.UpdatedReplicas != 3 || st.Replicas != 3 || st.ReadyReplicas != 3 {
			return fmt.Errorf("updated %d, replicas %d, ready %d", st.UpdatedReplicas, st.Replicas, st.ReadyReplicas)
		}
		pods, err := podsOf(ctx, "contend")
		if err != nil {
			return err
		}
		if len(pods) != 3 {
			return fmt.Errorf("%d pods", len(pods))
		}
		return nil
	})
	rolled := time.Since(began)
	time.Sleep(3 * time.Second) // contention after it

	promises, sections, pods := readRecords(t, records)
	n, broken := leasecheck.BrokenPromises(promises)
	overlaps, _ := leasecheck.Overlaps(sections)
	fences, badFence := leasecheck.FenceOrder(sections)
	t.Logf("rollout in %v; %d grants to %d pods (old and new) judged: %d broken promises, %d overlaps, %d fence-order violations; closest hand-off: %v from a release to the next grant",
		rolled.Round(time.Millisecond), len(promises), pods, n, overlaps, fences, closestHandOff(promises))
	if broken != nil {
		t.Errorf("a grant at %v while an earlier grant's promise stood %v more", promises[broken.Later].Granted, broken.By)
	}
	if overlaps > 0 || badFence != nil {
		t.Errorf("%d overlapping sections, fence violation %+v", overlaps, badFence)
	}
	if pods < 5 || len(promises) < 20 {
		t.Errorf("too little contention to judge: %d grants to %d pods", len(promises), pods)
	}
}

// readRecords reads the contenders' records: each grant's promise (from
// the time the pod had the answer to the earlier of its release and its
// valid_until) and section (from the grant to the release).
func readRecords(t *testing.T, dir string) ([]leasecheck.Promise, []leasecheck.Section, int) {
	t.Helper()
	// Times are cut to the microsecond: a release is taken at the end of its
	// step (later is stricter), a grant at the start (earlier is stricter).
	const step = time.Microsecond
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var (
		promises []leasecheck.Promise
		sections []leasecheck.Section
	)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		released := map[string]time.Time{}
		var grants []grantRecord
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			kind, rest, _ := strings.Cut(line, " ")
			when, rest, _ := strings.Cut(rest, " ")
			at := wallTime(t, when)
			switch kind {
			case "granted":
				l, err := parseLease(rest)
				if err != nil {
					t.Fatalf("%s: %q: %v", f.Name(), line, err)
				}
				grants = append(grants, grantRecord{Lease: l, at: at})
			case "released":
				if _, twice := released[rest]; twice {
					t.Fatalf("%s: token released twice (a harness bug: only the first release ends the lock): %q", f.Name(), line)
				}
				released[rest] = at.Add(step)
			}
		}
		for _, g := range grants {
			end, rel := g.ValidUntil, released[g.Token]
			if !rel.IsZero() && rel.Before(end) {
				end = rel
			}
			promises = append(promises, leasecheck.Promise{Key: g.Name, Granted: g.at, End: end})
			sections = append(sections, leasecheck.Section{Key: g.Name, Fence: g.Fence, Enter: g.at, Exit: end})
		}
	}
	return promises, sections, len(files)
}

type grantRecord struct {
	client.Lease
	at time.Time
}

// wallTime reads the script's "seconds.microseconds".
func wallTime(t *testing.T, s string) time.Time {
	t.Helper()
	sec, usec, ok := strings.Cut(s, ".")
	secs, err1 := strconv.ParseInt(sec, 10, 64)
	usecs, err2 := strconv.ParseInt(usec, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("time %q", s)
	}
	return time.Unix(secs, usecs*1000)
}

// closestHandOff is the shortest time from a promise's end to the next
// grant: how fine the records' clock must be to judge them.
func closestHandOff(promises []leasecheck.Promise) time.Duration {
	sorted := slices.Clone(promises)
	slices.SortFunc(sorted, func(a, b leasecheck.Promise) int { return a.Granted.Compare(b.Granted) })
	closest := time.Duration(-1)
	for i := 1; i < len(sorted); i++ {
		if gap := sorted[i].Granted.Sub(sorted[i-1].End); closest < 0 || gap < closest {
			closest = gap
		}
	}
	return closest
}
