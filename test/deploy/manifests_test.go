package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/sidelock/sidelock/internal/injector"
)

const (
	manifestsDir = "../../k8s"
	exampleNS    = "sidelock-example"
	exampleApp   = "example-app"
	// The masters' password: a Secret the user creates (k8s/kustomization.yaml).
	exampleAuthSecret = "sidelock-redis-auth"
)

// buildManifests runs `kustomize build k8s/` and decodes the result strictly.
func buildManifests(t *testing.T) []object {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), manifestsDir)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStream("kustomize build k8s", stream)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestManifests(t *testing.T) {
	objs := buildManifests(t)
	for _, o := range objs {
		want := exampleNS
		if _, ok := o.obj.(*corev1.Namespace); ok {
			want = "" // cluster-scoped; it is the namespace
			if o.meta().GetName() != exampleNS {
				t.Errorf("%s: want namespace %s", o, exampleNS)
			}
		}
		if ns := o.meta().GetNamespace(); ns != want {
			t.Errorf("%s: in namespace %q, want %q", o, ns, want)
		}
	}
	if named[*corev1.Namespace](objs, exampleNS) == nil {
		t.Errorf("no Namespace %s", exampleNS)
	}
	checkWorkloads(t, objs, exampleAuthSecret)

	m, ok := checkMasters(t, objs, exampleNS)
	if !ok {
		t.Fatal("no Redis masters")
	}
	if n := len(m.addrs); n != 3 {
		t.Errorf("%d masters, want 3", n)
	}
	app := exampleWorkload(t, objs)
	c := checkSidecar(t, app, sidecarWant{addrs: m.addrs, readiness: true})
	checkRestartDelay(t, m, keyTTL(t, c))
	checkManifestsAuth(t, objs, m, c)
	checkManifestsNetworkPolicy(t, objs, m, named[*appsv1.Deployment](objs, exampleApp).Spec.Template.Labels)
}

// The chart's secure defaults, without Helm (issue 16, finding 5): the
// masters require the password of a Secret the user creates (never one in
// the repository) and keep protected mode on; the masters, their probes and
// the sidecar read it from that one Secret.
func checkManifestsAuth(t *testing.T, objs []object, m masters, sidecar corev1.Container) {
	t.Helper()
	checkMastersAuth(t, m, true)
	if s := ofType[*corev1.Secret](objs); len(s) != 0 {
		t.Errorf("k8s/ builds %d Secrets; the password must come from one the user creates", len(s))
	}
	reads := map[string]corev1.Container{"REDIS_PASSWORD": *redisContainer(m.sts), "REDISCLI_AUTH": *redisContainer(m.sts), "SIDELOCK_REDIS_PASSWORD": sidecar}
	for name, c := range reads {
		var ref *corev1.SecretKeySelector
		for _, e := range c.Env {
			if e.Name == name && e.ValueFrom != nil {
				ref = e.ValueFrom.SecretKeyRef
			}
		}
		if ref == nil || ref.Name != exampleAuthSecret || ref.Key != "password" {
			t.Errorf("container %s: %s from %+v, want Secret %s key password", c.Name, name, ref, exampleAuthSecret)
		}
	}
}

// Only pods with the sidecar (labelled sidelock.io/inject: "true", as the
// example app is) reach the masters, as with the chart.
func checkManifestsNetworkPolicy(t *testing.T, objs []object, m masters, appPodLabels labels.Set) {
	t.Helper()
	var np *networkingv1.NetworkPolicy
	for _, p := range ofType[*networkingv1.NetworkPolicy](objs) {
		if selects(t, "NetworkPolicy "+p.Name, &p.Spec.PodSelector, m.sts.Spec.Template.Labels) {
			np = p
		}
	}
	if np == nil {
		t.Fatal("no NetworkPolicy selects the masters")
	}
	checkMastersPolicyTypes(t, np)
	var redisPort corev1.ContainerPort
	for _, p := range redisContainer(m.sts).Ports {
		if p.Name == "redis" {
			redisPort = p
		}
	}
	nsLabels := labels.Set{corev1.LabelMetadataName: exampleNS}
	for _, p := range []peer{
		{"the example app", appPodLabels, exampleNS, nsLabels, true},
		{"a pod with the sidecar elsewhere", labels.Set{injector.InjectLabel: "true"}, "shop", labels.Set{corev1.LabelMetadataName: "shop"}, true},
		{"a pod without the sidecar", labels.Set{"app.kubernetes.io/name": "other"}, exampleNS, nsLabels, false},
	} {
		if got := admits(t, np, p, redisPort); got != p.want {
			t.Errorf("%s (labels %v): admitted %v, want %v", p.name, p.labels, got, p.want)
		}
	}
}

// The masters' probes in k8s/ are the chart's with default values:
// distinct, readiness wanting an authenticated PONG, startup and liveness
// any answer, LOADING included (TestChartRedisProbes runs the chart's
// against a real redis-server).
func TestManifestsRedisProbesMatchChart(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	fromChart, ok := checkMasters(t, r.objs, releaseNS)
	if !ok {
		t.Fatal("the chart renders no masters")
	}
	byHand, ok := checkMasters(t, buildManifests(t), exampleNS)
	if !ok {
		t.Fatal("k8s/ has no masters")
	}
	a, b := redisContainer(byHand.sts), redisContainer(fromChart.sts)
	for name, probes := range map[string][2]*corev1.Probe{
		"startupProbe":   {a.StartupProbe, b.StartupProbe},
		"readinessProbe": {a.ReadinessProbe, b.ReadinessProbe},
		"livenessProbe":  {a.LivenessProbe, b.LivenessProbe},
	} {
		if !equality.Semantic.DeepEqual(probes[0], probes[1]) {
			t.Errorf("masters' %s differs:\n k8s/:  %+v\n chart: %+v", name, probes[0], probes[1])
		}
	}
	if equality.Semantic.DeepEqual(a.ReadinessProbe.Exec, a.LivenessProbe.Exec) {
		t.Error("the masters' readiness and liveness probes are one command")
	}
}

func exampleWorkload(t *testing.T, objs []object) workload {
	t.Helper()
	d := named[*appsv1.Deployment](objs, exampleApp)
	if d == nil {
		t.Fatalf("no Deployment %s", exampleApp)
	}
	return workloads([]object{{source: manifestsDir, obj: d}})[0]
}

// Every manifest in k8s/ is part of the kustomization (a forgotten file
// would silently not be applied), and kustomization.yaml has no unknown
// fields.
func TestManifestsAllListed(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(manifestsDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(k.Resources, base) {
			t.Errorf("%s is not in kustomization.yaml resources", base)
		}
	}
}

// The sidecar written by hand in k8s/ is the one the chart renders with
// default values, apart from image and masters.
func TestManifestsSidecarMatchesChart(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	fromChart := sidecarOf(t, helmTestPod(t, r.objs))
	byHand := sidecarOf(t, exampleWorkload(t, buildManifests(t)))

	fields := map[string]func(c corev1.Container) any{
		"name":            func(c corev1.Container) any { return c.Name },
		"restartPolicy":   func(c corev1.Container) any { return c.RestartPolicy },
		"imagePullPolicy": func(c corev1.Container) any { return c.ImagePullPolicy },
		"ports":           func(c corev1.Container) any { return c.Ports },
		"startupProbe":    func(c corev1.Container) any { return c.StartupProbe },
		"readinessProbe":  func(c corev1.Container) any { return c.ReadinessProbe },
		"livenessProbe":   func(c corev1.Container) any { return c.LivenessProbe },
		"resources":       func(c corev1.Container) any { return c.Resources },
		"securityContext": func(c corev1.Container) any { return c.SecurityContext },
	}
	for name, get := range fields {
		if a, b := get(byHand), get(fromChart); !equality.Semantic.DeepEqual(a, b) {
			t.Errorf("%s differs:\n k8s/:  %+v\n chart: %+v", name, a, b)
		}
	}
	// Variables set by hand must agree with the chart (which sets them all).
	for _, e := range byHand.Env {
		if e.Name == "SIDELOCK_REDIS_ADDRS" {
			continue
		}
		if v, ok := env(fromChart, e.Name); !ok || v != e.Value {
			t.Errorf("env %s: k8s/ %q, chart %q", e.Name, e.Value, v)
		}
	}
}
