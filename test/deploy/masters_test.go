package deploy

import (
	"bufio"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// masters is what checkMasters learnt about the Redis masters.
type masters struct {
	sts          *appsv1.StatefulSet
	addrs        []string            // host:port per pod, by ordinal
	conf         map[string][]string // redis.conf: directive -> arguments
	antiAffinity string              // "hard" (required) or "soft" (preferred)
	restartDelay time.Duration       // sleep before redis-server starts
}

// fsyncAlways reports whether no acknowledged write can be lost in a crash.
func (m masters) fsyncAlways() bool {
	return strings.Join(m.conf["appendonly"], " ") == "yes" && strings.Join(m.conf["appendfsync"], " ") == "always"
}

// checkMasters finds the Redis StatefulSet among objs (deployed to
// namespace ns) and checks that it is a set of independent masters that
// sidecars can address one by one. ok is false when there is none.
func checkMasters(t *testing.T, objs []object, ns string) (m masters, ok bool) {
	t.Helper()
	var found []*appsv1.StatefulSet
	for _, s := range ofType[*appsv1.StatefulSet](objs) {
		if redisContainer(s) != nil {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		return m, false
	case 1:
	default:
		t.Fatalf("want 1 Redis StatefulSet, found %d", len(found))
	}
	sts := found[0]
	m.sts = sts
	where := "StatefulSet " + sts.Name
	pod := labels.Set(sts.Spec.Template.Labels)
	if !selects(t, where+" selector", sts.Spec.Selector, pod) {
		t.Errorf("%s: selector does not match its pod labels", where)
	}
	if sts.Spec.Replicas == nil {
		t.Fatalf("%s: replicas unset", where)
	}
	c := redisContainer(sts)
	port := portNamed(*c, "redis")
	if port == 0 {
		t.Fatalf("%s: no container port named redis", where)
	}

	// Per-pod DNS names need a headless Service selecting the pods.
	svc := named[*corev1.Service](objs, sts.Spec.ServiceName)
	switch {
	case svc == nil:
		t.Fatalf("%s: no Service %q (serviceName)", where, sts.Spec.ServiceName)
	case svc.Spec.ClusterIP != corev1.ClusterIPNone:
		t.Errorf("Service %s: not headless", svc.Name)
	case len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod):
		t.Errorf("Service %s: selector %v does not match the masters %v", svc.Name, svc.Spec.Selector, pod)
	}
	for i := range int(*sts.Spec.Replicas) {
		m.addrs = append(m.addrs, fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local:%d", sts.Name, i, svc.Name, ns, port))
	}

	m.antiAffinity = antiAffinity(t, where, sts.Spec.Template.Spec.Affinity, pod)
	m.conf = redisConf(t, objs, sts, *c)
	for _, d := range []string{"replicaof", "slaveof"} {
		if _, ok := m.conf[d]; ok {
			t.Errorf("%s: redis.conf makes it a replica (%s)", where, d)
		}
	}
	if delay := regexp.MustCompile(`\bsleep (\d+)\b`).FindStringSubmatch(strings.Join(c.Command, " ")); delay != nil {
		n, _ := strconv.Atoi(delay[1])
		m.restartDelay = time.Duration(n) * time.Second
	}
	checkDisruptionBudget(t, objs, pod, int(*sts.Spec.Replicas))
	return m, true
}

// redisContainer returns the container running the redis image, if any.
func redisContainer(s *appsv1.StatefulSet) *corev1.Container {
	for i, c := range s.Spec.Template.Spec.Containers {
		if repo, _, _ := strings.Cut(path.Base(c.Image), ":"); repo == "redis" {
			return &s.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

func portNamed(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func selects(t *testing.T, where string, sel *metav1.LabelSelector, set labels.Set) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return false
	}
	return !s.Empty() && s.Matches(set)
}

// antiAffinity returns "hard" or "soft" for a pod anti-affinity against the
// masters themselves on a non-empty topology key; masters sharing a node
// fail together.
func antiAffinity(t *testing.T, where string, a *corev1.Affinity, pod labels.Set) string {
	t.Helper()
	if a == nil || a.PodAntiAffinity == nil {
		t.Errorf("%s: no pod anti-affinity", where)
		return ""
	}
	spreads := func(term corev1.PodAffinityTerm) bool {
		return term.TopologyKey != "" && selects(t, where+" anti-affinity", term.LabelSelector, pod)
	}
	for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if spreads(term) {
			return "hard"
		}
	}
	for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if spreads(w.PodAffinityTerm) {
			return "soft"
		}
	}
	t.Errorf("%s: pod anti-affinity does not select the masters", where)
	return ""
}

// redisConf parses the redis.conf that the container's command loads from
// a mounted ConfigMap.
func redisConf(t *testing.T, objs []object, sts *appsv1.StatefulSet, c corev1.Container) map[string][]string {
	t.Helper()
	cmd := strings.Join(c.Command, " ")
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		for _, mnt := range c.VolumeMounts {
			file := path.Join(mnt.MountPath, "redis.conf")
			if mnt.Name != v.Name || !strings.Contains(cmd, "redis-server "+file) {
				continue
			}
			cm := named[*corev1.ConfigMap](objs, v.ConfigMap.Name)
			if cm == nil {
				t.Fatalf("no ConfigMap %s", v.ConfigMap.Name)
			}
			conf := map[string][]string{}
			sc := bufio.NewScanner(strings.NewReader(cm.Data["redis.conf"]))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) > 0 && !strings.HasPrefix(f[0], "#") {
					conf[strings.ToLower(f[0])] = f[1:]
				}
			}
			return conf
		}
	}
	t.Fatalf("StatefulSet %s: redis-server does not load a redis.conf from a ConfigMap", sts.Name)
	return nil
}

// checkDisruptionBudget: drains never take away more masters than a quorum
// can spare ((n-1)/2, but at least 1 so a single master can be drained).
func checkDisruptionBudget(t *testing.T, objs []object, pod labels.Set, n int) {
	t.Helper()
	for _, pdb := range ofType[*policyv1.PodDisruptionBudget](objs) {
		if !selects(t, "PodDisruptionBudget "+pdb.Name, pdb.Spec.Selector, pod) {
			continue
		}
		want := max(1, (n-1)/2)
		if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != want {
			t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, want %d for %d masters", pdb.Name, mu, want, n)
		}
		return
	}
	t.Errorf("no PodDisruptionBudget for the masters")
}

// checkRestartDelay: unless every write is fsynced, a restarted master has
// lost its keys and must stay away longer than the key TTL of the sidecars.
func checkRestartDelay(t *testing.T, m masters, keyTTL time.Duration) {
	t.Helper()
	if !m.fsyncAlways() && m.restartDelay <= keyTTL {
		t.Errorf("StatefulSet %s: restart delay %v must exceed the sidecar key TTL %v", m.sts.Name, m.restartDelay, keyTTL)
	}
}
