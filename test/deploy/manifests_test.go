package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	manifestsDir = "../../k8s"
	exampleNS    = "sidelock-example"
	exampleApp   = "example-app"
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
	checkWorkloads(t, objs)

	m, ok := checkMasters(t, objs, exampleNS)
	if !ok {
		t.Fatal("no Redis masters")
	}
	if n := len(m.addrs); n != 3 {
		t.Errorf("%d masters, want 3", n)
	}
	c := checkSidecar(t, exampleWorkload(t, objs), sidecarWant{addrs: m.addrs, readiness: true})
	checkRestartDelay(t, m, keyTTL(t, c))
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
