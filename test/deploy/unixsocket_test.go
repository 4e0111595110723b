package deploy

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The chart's Unix socket option (sidecar.unixSocket): the sidecar serves
// the lock API on /run/sidelock/api.sock in an emptyDir that the helm test
// pod's client container mounts too, whether the pod includes the sidecar
// itself or the injector adds it (with the mount and SIDELOCK_ADDR for
// the app's containers). The admin listener stays on TCP for the probes.
func TestChartUnixSocket(t *testing.T) {
	for _, injected := range []bool{false, true} {
		values := "sidecar: {unixSocket: true}\ninjector: {enabled: false}"
		if injected {
			values = "sidecar: {unixSocket: true}"
		}
		vals := parseValues(t, values)
		for _, m := range lintChart(t, vals) {
			t.Errorf("helm lint: %s", m)
		}
		r, err := render(loadChart(t), vals, releaseName)
		if err != nil {
			t.Fatal(err)
		}
		checkWorkloads(t, r.objs)
		pod := helmTestPod(t, r.objs)
		sidecar := sidecarOf(t, pod)
		where := pod.String() + " sidecar"
		if addr, _ := env(sidecar, "SIDELOCK_LISTEN_ADDR"); addr != "unix:///run/sidelock/api.sock" {
			t.Errorf("%s: SIDELOCK_LISTEN_ADDR=%q, want the socket", where, addr)
		}
		if sidecar.StartupProbe == nil || sidecar.StartupProbe.HTTPGet == nil || sidecar.StartupProbe.HTTPGet.Port.StrVal != "sidelock-admin" {
			t.Errorf("%s: the probes must stay on the admin port", where)
		}
		checkSocketMount(t, where, sidecar)
		if !slices.ContainsFunc(pod.spec.Volumes, func(v corev1.Volume) bool { return v.Name == "sidelock-socket" && v.EmptyDir != nil }) {
			t.Errorf("%s (injected %v): no emptyDir sidelock-socket among %+v", pod, injected, pod.spec.Volumes)
		}
		for _, c := range pod.spec.Containers {
			checkSocketMount(t, pod.String()+" container "+c.Name, c)
			if v, _ := env(c, "CURL_OPTS"); v != "--unix-socket /run/sidelock/api.sock" {
				t.Errorf("%s: CURL_OPTS=%q, want curl on the socket", c.Name, v)
			}
			if v, ok := env(c, "SIDELOCK_ADDR"); injected && v != "unix:///run/sidelock/api.sock" {
				t.Errorf("injected %s: SIDELOCK_ADDR=%q (set %v), want the socket", c.Name, v, ok)
			}
		}
	}
}

func checkSocketMount(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "sidelock-socket" && m.MountPath == "/run/sidelock" }) {
		t.Errorf("%s: does not mount sidelock-socket at /run/sidelock: %+v", where, c.VolumeMounts)
	}
}
