package deploy

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

// skaffoldConfig is the part of skaffold.yaml this repository uses.
type skaffoldConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Build      struct {
		Artifacts []struct {
			Image   string `json:"image"`
			Context string `json:"context"`
			Docker  *struct {
				Dockerfile string            `json:"dockerfile"`
				BuildArgs  map[string]string `json:"buildArgs"`
			} `json:"docker"`
		} `json:"artifacts"`
	} `json:"build"`
	Manifests skaffoldManifests `json:"manifests"`
	Profiles  []struct {
		Name      string            `json:"name"`
		Manifests skaffoldManifests `json:"manifests"`
		Patches   []skaffoldPatch   `json:"patches"`
		Deploy    struct {
			Helm *struct {
				Releases []struct {
					Name              string            `json:"name"`
					ChartPath         string            `json:"chartPath"`
					SetValues         map[string]string `json:"setValues"`
					SetValueTemplates map[string]string `json:"setValueTemplates"`
				} `json:"releases"`
			} `json:"helm"`
		} `json:"deploy"`
	} `json:"profiles"`
}

type skaffoldPatch struct {
	Op   string `json:"op"`
	Path string `json:"path"`
}

type skaffoldManifests struct {
	Kustomize *struct {
		Paths []string `json:"paths"`
	} `json:"kustomize"`
}

// No skaffold here: check that skaffold.yaml points at what exists, and
// that the values it gives the chart pass the chart's schema.
func TestSkaffold(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "skaffold.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg skaffoldConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^skaffold/v4beta\d+$`).MatchString(cfg.APIVersion) || cfg.Kind != "Config" {
		t.Errorf("apiVersion %q kind %q, want skaffold/v4betaN Config", cfg.APIVersion, cfg.Kind)
	}

	if len(cfg.Build.Artifacts) != 1 || cfg.Build.Artifacts[0].Image != "sidelock" || cfg.Build.Artifacts[0].Docker == nil {
		t.Fatalf("want one docker artifact named sidelock, have %+v", cfg.Build.Artifacts)
	}
	art := cfg.Build.Artifacts[0]
	mustExist(t, filepath.Join(repoRoot, art.Context, art.Docker.Dockerfile))
	if _, ok := art.Docker.BuildArgs["VERSION"]; !ok {
		t.Error("no VERSION build arg")
	}

	checkKustomize := func(where string, m skaffoldManifests) {
		if m.Kustomize == nil || !slices.Equal(m.Kustomize.Paths, []string{"k8s"}) {
			t.Errorf("%s: want kustomize paths [k8s], have %+v", where, m.Kustomize)
			return
		}
		mustExist(t, filepath.Join(repoRoot, "k8s", "kustomization.yaml"))
	}
	// Without a default pipeline skaffold would apply k8s/*.yaml one by one.
	checkKustomize("default pipeline", cfg.Manifests)

	names := map[string]bool{}
	for _, p := range cfg.Profiles {
		names[p.Name] = true
		switch p.Name {
		case "manifests":
			checkKustomize("profile manifests", p.Manifests)
		case "chart":
			// Profiles merge into the default pipeline; the kustomize
			// manifests must go or both would be deployed.
			if !slices.Contains(p.Patches, skaffoldPatch{Op: "remove", Path: "/manifests/kustomize"}) {
				t.Error("profile chart does not remove the default kustomize manifests")
			}
			if p.Deploy.Helm == nil || len(p.Deploy.Helm.Releases) != 1 {
				t.Fatal("profile chart: want one helm release")
			}
			rel := p.Deploy.Helm.Releases[0]
			if filepath.Clean(rel.ChartPath) != "charts/sidelock" {
				t.Errorf("chartPath %s, want charts/sidelock", rel.ChartPath)
			}
			checkSkaffoldValues(t, rel.SetValues, rel.SetValueTemplates)
		}
	}
	if !names["chart"] || !names["manifests"] {
		t.Errorf("profiles %v, want chart and manifests", names)
	}
}

// checkSkaffoldValues renders the chart with the values skaffold sets, its
// image templates filled in as skaffold would.
func checkSkaffoldValues(t *testing.T, setValues, templates map[string]string) {
	t.Helper()
	set := maps.Clone(setValues)
	if set == nil {
		set = map[string]string{}
	}
	built := map[string]string{
		"IMAGE_REPO_sidelock":   "registry.local/sidelock",
		"IMAGE_TAG_sidelock":    "0a1b2c3d",
		"IMAGE_DIGEST_sidelock": "sha256:" + strings.Repeat("ab", 32),
	}
	vals := map[string]any{}
	for key, tmpl := range templates {
		var b strings.Builder
		if err := template.Must(template.New(key).Option("missingkey=error").Parse(tmpl)).Execute(&b, built); err != nil {
			t.Errorf("setValueTemplates %s: %v", key, err)
		}
		set[key] = b.String()
	}
	for _, key := range []string{"image.repository", "image.tag"} {
		if _, ok := set[key]; !ok {
			t.Errorf("skaffold does not set %s to the image it built", key)
		}
	}
	for key, v := range set {
		if err := strvals.ParseInto(fmt.Sprintf("%s=%s", key, v), vals); err != nil {
			t.Fatal(err)
		}
	}
	r, err := render(loadChart(t), vals, releaseName)
	if err != nil {
		t.Fatalf("chart refuses skaffold's values: %v", err)
	}
	c := sidecarOf(t, helmTestPod(t, r.objs))
	if want := built["IMAGE_REPO_sidelock"] + ":" + set["image.tag"]; c.Image != want {
		t.Errorf("sidecar image %s, want %s", c.Image, want)
	}
}

func mustExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Error(err)
	}
}
