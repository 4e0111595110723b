package deploy

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// sidecarWant is what a pod's sidelock sidecar must be given.
type sidecarWant struct {
	addrs     []string // SIDELOCK_REDIS_ADDRS, in order; unset when groups is set
	groups    string   // SIDELOCK_REDIS_GROUPS, exactly; "": unset
	previous  string   // SIDELOCK_REDIS_GROUPS_PREVIOUS, exactly; "": unset
	readiness bool     // whether it has a readiness probe
}

// Defaults of the binary, used when the environment does not set them.
const (
	defaultListenAddr = "127.0.0.1:7420"
	defaultAdminAddr  = ":7421"
	defaultKeyTTL     = 10 * time.Second
)

// sidecarOf returns the sidelock container of a pod: the one that is told
// where the masters are (one quorum or several groups). There must be
// exactly one, among initContainers.
func sidecarOf(t *testing.T, w workload) corev1.Container {
	t.Helper()
	isSidecar := func(c corev1.Container) bool {
		_, addrs := env(c, "SIDELOCK_REDIS_ADDRS")
		_, groups := env(c, "SIDELOCK_REDIS_GROUPS")
		return addrs || groups
	}
	if i := slices.IndexFunc(w.spec.Containers, isSidecar); i >= 0 {
		t.Errorf("%s: sidelock container %s is a regular container, not a native sidecar", w, w.spec.Containers[i].Name)
	}
	var found []corev1.Container
	for _, c := range w.spec.InitContainers {
		if isSidecar(c) {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: want 1 sidelock init container, found %d", w, len(found))
	}
	return found[0]
}

// checkSidecar checks the sidelock container of a pod and returns it.
func checkSidecar(t *testing.T, w workload, want sidecarWant) corev1.Container {
	t.Helper()
	c := sidecarOf(t, w)
	where := w.String() + " sidecar " + c.Name

	// Native sidecar: started before the app and kept running beside it.
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("%s: restartPolicy is not Always: not a native sidecar", where)
	}
	if c.Image == "" {
		t.Errorf("%s: no image", where)
	}

	// The lock API is for this pod only.
	listenHost, listenPort := addrPort(envOr(c, "SIDELOCK_LISTEN_ADDR", defaultListenAddr))
	if ip := net.ParseIP(listenHost); listenHost != "localhost" && (ip == nil || !ip.IsLoopback()) {
		t.Errorf("%s: lock API listens on %q, not loopback", where, listenHost)
	}
	_, adminPort := addrPort(envOr(c, "SIDELOCK_ADMIN_ADDR", defaultAdminAddr))
	if adminPort == 0 || adminPort == listenPort {
		t.Errorf("%s: bad admin port %d (lock API %d)", where, adminPort, listenPort)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "sidelock-admin" || c.Ports[0].ContainerPort != adminPort || c.Ports[0].HostPort != 0 {
		t.Errorf("%s: ports must be just sidelock-admin=%d, are %+v", where, adminPort, c.Ports)
	}

	// Probes: admin port only; liveness never depends on Redis.
	checkAdminProbe(t, where+" startupProbe", c, c.StartupProbe, "/healthz", adminPort)
	checkAdminProbe(t, where+" livenessProbe", c, c.LivenessProbe, "/healthz", adminPort)
	if want.readiness {
		checkAdminProbe(t, where+" readinessProbe", c, c.ReadinessProbe, "/readyz", adminPort)
	} else if c.ReadinessProbe != nil {
		t.Errorf("%s: has a readinessProbe, want none", where)
	}

	// Injected into arbitrary pods, so it carries its own security settings
	// rather than relying on the pod's.
	checkHardened(t, where, c, nil)
	if sc := c.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("%s: runAsUser is not 65532 (the image's nonroot user)", where)
	}

	if f, _ := env(c, "SIDELOCK_LOG_FORMAT"); f != "json" {
		t.Errorf("%s: SIDELOCK_LOG_FORMAT=%q, want json", where, f)
	}
	checkMastersEnv(t, where, c, want)
	return c
}

// checkMastersEnv: the sidecar is told its masters in exactly one way
// (SIDELOCK_REDIS_ADDRS for one quorum, SIDELOCK_REDIS_GROUPS for several
// groups: the binary refuses both), and the previous group list only when
// one is wanted.
func checkMastersEnv(t *testing.T, where string, c corev1.Container, want sidecarWant) {
	t.Helper()
	raw, hasAddrs := env(c, "SIDELOCK_REDIS_ADDRS")
	groups, hasGroups := env(c, "SIDELOCK_REDIS_GROUPS")
	if want.groups != "" {
		if hasAddrs {
			t.Errorf("%s: SIDELOCK_REDIS_ADDRS=%q set beside SIDELOCK_REDIS_GROUPS", where, raw)
		}
		if groups != want.groups {
			t.Errorf("%s: SIDELOCK_REDIS_GROUPS\n got %q\nwant %q", where, groups, want.groups)
		}
	} else {
		if hasGroups {
			t.Errorf("%s: SIDELOCK_REDIS_GROUPS=%q set, want SIDELOCK_REDIS_ADDRS alone", where, groups)
		}
		addrs := strings.Split(raw, ",")
		if !slices.Equal(addrs, want.addrs) {
			t.Errorf("%s: SIDELOCK_REDIS_ADDRS\n got %q\nwant %q", where, addrs, want.addrs)
		}
		if sorted := slices.Sorted(slices.Values(addrs)); len(slices.Compact(sorted)) != len(addrs) {
			t.Errorf("%s: SIDELOCK_REDIS_ADDRS has duplicates: %q", where, raw)
		}
	}
	if previous, ok := env(c, "SIDELOCK_REDIS_GROUPS_PREVIOUS"); ok != (want.previous != "") || previous != want.previous {
		t.Errorf("%s: SIDELOCK_REDIS_GROUPS_PREVIOUS=%q (set: %v), want %q", where, previous, ok, want.previous)
	}
}

// checkAdminProbe: an httpGet probe on path, on the admin port (by name or
// number), hence never on the lock API.
func checkAdminProbe(t *testing.T, where string, c corev1.Container, p *corev1.Probe, path string, adminPort int32) {
	t.Helper()
	switch port, err := probePortOrZero(c, p); {
	case p == nil:
		t.Errorf("%s: missing", where)
	case p.HTTPGet == nil:
		t.Errorf("%s: not an httpGet probe", where)
	case p.HTTPGet.Path != path:
		t.Errorf("%s: path %s, want %s", where, p.HTTPGet.Path, path)
	case err != nil || port != adminPort:
		t.Errorf("%s: port %v (%v), want the admin port %d", where, p.HTTPGet.Port.String(), err, adminPort)
	}
}

func probePortOrZero(c corev1.Container, p *corev1.Probe) (int32, error) {
	if p == nil {
		return 0, nil
	}
	return probePort(c, p)
}

func envOr(c corev1.Container, name, def string) string {
	if v, ok := env(c, name); ok {
		return v
	}
	return def
}

// keyTTL is the TTL the sidecar puts on lock keys in Redis.
func keyTTL(t *testing.T, c corev1.Container) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(envOr(c, "SIDELOCK_KEY_TTL", defaultKeyTTL.String()))
	if err != nil {
		t.Fatalf("sidecar %s: SIDELOCK_KEY_TTL: %v", c.Name, err)
	}
	return d
}
