package deploy

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// workload is anything that runs pods, reduced to what the checks need.
type workload struct {
	object
	spec   *corev1.PodSpec
	claims []string // volumeClaimTemplates of a StatefulSet
}

func workloads(objs []object) []workload {
	var out []workload
	for _, o := range objs {
		w := workload{object: o}
		switch v := o.obj.(type) {
		case *corev1.Pod:
			w.spec = &v.Spec
		case *appsv1.Deployment:
			w.spec = &v.Spec.Template.Spec
		case *appsv1.DaemonSet:
			w.spec = &v.Spec.Template.Spec
		case *appsv1.StatefulSet:
			w.spec = &v.Spec.Template.Spec
			for _, c := range v.Spec.VolumeClaimTemplates {
				w.claims = append(w.claims, c.Name)
			}
		case *batchv1.Job:
			w.spec = &v.Spec.Template.Spec
		default:
			continue
		}
		out = append(out, w)
	}
	return out
}

func (w workload) containers() []corev1.Container {
	return slices.Concat(w.spec.InitContainers, w.spec.Containers)
}

// checkWorkloads checks what must hold for every pod shipped here: each
// container is locked down and sized, and every reference inside the pod
// (volumes, ConfigMaps, Secrets, probe ports) resolves, and names and labels
// are valid. Secrets named in
// external may come from outside the rendered objects.
func checkWorkloads(t *testing.T, objs []object, external ...string) {
	t.Helper()
	checkMeta(t, objs)
	ws := workloads(objs)
	if len(ws) == 0 {
		t.Fatal("no workloads")
	}
	for _, w := range ws {
		volumes := slices.Clone(w.claims)
		for _, v := range w.spec.Volumes {
			volumes = append(volumes, v.Name)
			if v.ConfigMap != nil && named[*corev1.ConfigMap](objs, v.ConfigMap.Name) == nil {
				t.Errorf("%s: volume %s: no ConfigMap %s", w, v.Name, v.ConfigMap.Name)
			}
		}
		for _, c := range w.containers() {
			where := w.String() + " container " + c.Name
			checkHardened(t, where, c, w.spec.SecurityContext)
			checkSized(t, where, c)
			checkNoReplication(t, where, c)
			for _, m := range c.VolumeMounts {
				if !slices.Contains(volumes, m.Name) {
					t.Errorf("%s: mount of unknown volume %s", where, m.Name)
				}
			}
			for _, e := range c.Env {
				if ref := secretRef(e); ref != "" && !slices.Contains(external, ref) && named[*corev1.Secret](objs, ref) == nil {
					t.Errorf("%s: env %s: no Secret %s", where, e.Name, ref)
				}
			}
			for _, p := range probes(c) {
				if _, err := probePort(c, p); err != nil {
					t.Errorf("%s: %v", where, err)
				}
			}
		}
	}
}

// checkMeta checks names and labels as the API server would: Service names
// are DNS labels, other names DNS subdomains, labels well-formed.
func checkMeta(t *testing.T, objs []object) {
	t.Helper()
	checkLabels := func(where string, set map[string]string) {
		for k, v := range set {
			for _, msg := range slices.Concat(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)) {
				t.Errorf("%s: label %s=%s: %s", where, k, v, msg)
			}
		}
	}
	for _, o := range objs {
		isName := validation.IsDNS1123Subdomain
		if _, ok := o.obj.(*corev1.Service); ok {
			isName = validation.IsDNS1035Label
		}
		for _, msg := range isName(o.meta().GetName()) {
			t.Errorf("%s: name: %s", o, msg)
		}
		checkLabels(o.String(), o.meta().GetLabels())
	}
	for _, w := range workloads(objs) {
		if tmpl := podTemplateLabels(w.obj); tmpl != nil {
			checkLabels(w.String()+" pod template", tmpl)
		}
	}
}

func podTemplateLabels(obj any) map[string]string {
	switch v := obj.(type) {
	case *appsv1.Deployment:
		return v.Spec.Template.Labels
	case *appsv1.StatefulSet:
		return v.Spec.Template.Labels
	case *appsv1.DaemonSet:
		return v.Spec.Template.Labels
	case *batchv1.Job:
		return v.Spec.Template.Labels
	}
	return nil
}

func secretRef(e corev1.EnvVar) string {
	if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		return ""
	}
	return e.ValueFrom.SecretKeyRef.Name
}

// checkHardened: no root, no privilege escalation, no capabilities,
// read-only root filesystem, default seccomp (pod-level settings count).
func checkHardened(t *testing.T, where string, c corev1.Container, pod *corev1.PodSecurityContext) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no securityContext", where)
		return
	}
	nonRoot := sc.RunAsNonRoot
	seccomp := sc.SeccompProfile
	if pod != nil {
		nonRoot = cmp.Or(nonRoot, pod.RunAsNonRoot)
		seccomp = cmp.Or(seccomp, pod.SeccompProfile)
	}
	switch {
	case !isTrue(nonRoot):
		t.Errorf("%s: runAsNonRoot is not true", where)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: allowPrivilegeEscalation is not false", where)
	case !isTrue(sc.ReadOnlyRootFilesystem):
		t.Errorf("%s: readOnlyRootFilesystem is not true", where)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("%s: capabilities are not exactly drop [ALL]", where)
	case seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: seccompProfile is not RuntimeDefault", where)
	case sc.Privileged != nil && *sc.Privileged:
		t.Errorf("%s: privileged", where)
	}
}

// checkSized: requests for scheduling, a memory limit against leaks.
func checkSized(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("%s: needs cpu and memory requests and a memory limit, has %v", where, r)
	}
}

// checkNoReplication: Redlock's masters must be independent, so nothing we
// run may make a Redis a replica.
func checkNoReplication(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	for _, arg := range slices.Concat(c.Command, c.Args) {
		if l := strings.ToLower(arg); strings.Contains(l, "replicaof") || strings.Contains(l, "slaveof") {
			t.Errorf("%s: command line mentions replication: %q", where, arg)
		}
	}
}

func probes(c corev1.Container) []*corev1.Probe {
	var ps []*corev1.Probe
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// probePort resolves the port of an httpGet or tcpSocket probe (0 for exec)
// against the container's ports, as the kubelet does.
func probePort(c corev1.Container, p *corev1.Probe) (int32, error) {
	var port intstr.IntOrString
	switch {
	case p.HTTPGet != nil:
		port = p.HTTPGet.Port
	case p.TCPSocket != nil:
		port = p.TCPSocket.Port
	default:
		return 0, nil
	}
	if port.Type == intstr.Int {
		return port.IntVal, nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return cp.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("probe on unknown port name %q", port.StrVal)
}

func isTrue(b *bool) bool { return b != nil && *b }

// env returns the literal value of an environment variable and whether it
// is set.
func env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// addrPort splits host:port; the port is 0 when unparsable.
func addrPort(addr string) (string, int32) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0
	}
	n, _ := strconv.ParseInt(port, 10, 32)
	return host, int32(n)
}
