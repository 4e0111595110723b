package main

import (
	"archive/tar"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const repoDockerfile = "../../Dockerfile"

var testVars = map[string]string{"VERSION": "v9.8.7", "REVISION": "0123abc"}

// The image built here says what the Dockerfile's runtime stage says:
// user, entrypoint, ports, labels; the binary at the entrypoint, owned by
// root and executable, the user in /etc/passwd, the CA bundle present.
func TestImageIsTheDockerfilesRuntimeStage(t *testing.T) {
	stage, err := readRuntimeStage(repoDockerfile, testVars)
	if err != nil {
		t.Fatal(err)
	}
	if stage.Labels["org.opencontainers.image.version"] != "v9.8.7" || stage.Labels["org.opencontainers.image.revision"] != "0123abc" {
		t.Errorf("labels %v: version and revision not stamped", stage.Labels)
	}
	img := buildOne(t, time.Unix(1700000000, 0))
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != stage.User || !slices.Equal(c.Entrypoint, stage.Entrypoint) || len(c.Cmd) != 0 ||
		!slices.Equal(slices.Sorted(maps.Keys(c.ExposedPorts)), slices.Sorted(slices.Values(stage.Ports))) ||
		!maps.Equal(c.Labels, stage.Labels) {
		t.Errorf("image config %+v\ndoes not match the Dockerfile's runtime stage %+v", c, stage)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || cfg.RootFS.Type != "layers" {
		t.Errorf("platform %s/%s, rootfs %q", cfg.OS, cfg.Architecture, cfg.RootFS.Type)
	}

	files := filesOf(t, img)
	uid, _, _ := strings.Cut(stage.User, ":")
	bin := files[strings.TrimPrefix(stage.Entrypoint[0], "/")]
	if bin == nil || bin.Mode != 0o755 || bin.Uid != 0 || bin.Gid != 0 {
		t.Errorf("entrypoint %s in the image: %+v, want mode 0755 owned by root", stage.Entrypoint[0], bin)
	}
	if passwd := files["etc/passwd"]; passwd == nil || !strings.Contains(passwd.content, ":x:"+uid+":") {
		t.Errorf("/etc/passwd has no user %s: %+v", uid, passwd)
	}
	if ca := files[strings.TrimPrefix(caPath, "/")]; ca == nil || !strings.Contains(ca.content, "BEGIN CERTIFICATE") {
		t.Errorf("no CA bundle at %s", caPath)
	}
}

// The same inputs give the same image digest (and a different creation
// time a different one): a release can be rebuilt and checked.
func TestImageIsReproducible(t *testing.T) {
	at := time.Unix(1700000000, 0)
	a, b, later := digest(t, buildOne(t, at)), digest(t, buildOne(t, at)), digest(t, buildOne(t, at.Add(time.Second)))
	if a != b {
		t.Errorf("two builds of the same inputs: %s and %s", a, b)
	}
	if a == later {
		t.Error("the creation time does not reach the image")
	}
}

// The layout holds one index named by the version, with every platform;
// the tarball `docker load` reads holds the same image as the layout.
func TestLayoutAndArchive(t *testing.T) {
	dir := t.TempDir()
	bin := fakeBinary(t)
	opts := options{dockerfile: repoDockerfile, version: "v9.8.7", revision: "0123abc", caFile: caFile(t),
		binaries: platformBinaries{{"linux", "amd64", bin}, {"linux", "arm64", bin}},
		ociDir:   filepath.Join(dir, "oci"), archive: filepath.Join(dir, "img_%s_%s.tar"), tag: "example.test/sidelock:v9.8.7",
		created: time.Unix(1700000000, 0)}
	args := []string{"-dockerfile", opts.dockerfile, "-version", opts.version, "-revision", opts.revision, "-ca", opts.caFile,
		"-bin", "linux/amd64=" + bin, "-bin", "linux/arm64=" + bin, "-oci", opts.ociDir, "-archive", opts.archive,
		"-tag", opts.tag, "-source-date-epoch", "1700000000"}
	if err := run(args); err != nil {
		t.Fatal(err)
	}
	root, err := layout.ImageIndexFromPath(opts.ociDir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := root.IndexManifest()
	if err != nil || len(top.Manifests) != 1 || top.Manifests[0].Annotations[refNameAnnotation] != "v9.8.7" {
		t.Fatalf("index.json: %+v (%v), want one entry named v9.8.7", top, err)
	}
	idx, err := root.ImageIndex(top.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range manifest.Manifests {
		platforms = append(platforms, m.Platform.String())
		loaded, err := tarball.ImageFromPath(strings.Replace(strings.Replace(opts.archive, "%s", m.Platform.OS, 1), "%s", m.Platform.Architecture, 1), nil)
		if err != nil {
			t.Fatalf("%s tarball: %v", m.Platform, err)
		}
		// docker load keeps the config (its digest is the image ID) and the
		// layers; the manifest is the engine's own.
		fromLayout, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := configDigest(t, loaded), configDigest(t, fromLayout); a != b {
			t.Errorf("%s: tarball holds image %s, the layout %s", m.Platform, a, b)
		}
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v", platforms)
	}
}

// The parser refuses what it would not reproduce, rather than building a
// different image than `docker build` does.
func TestRuntimeStageRefusals(t *testing.T) {
	base := "FROM golang AS build\nRUN go build\nFROM scratch\nUSER 1:1\nCOPY --from=build /out/x /x\n"
	for name, tail := range map[string]string{
		"a RUN":                   "ENTRYPOINT [\"/x\"]\nRUN touch /y\n",
		"shell-form ENTRYPOINT":   "ENTRYPOINT /x\n",
		"an unknown variable":     "ENTRYPOINT [\"/x\"]\nLABEL a=${NOPE}\n",
		"an entrypoint not /x":    "ENTRYPOINT [\"/y\"]\n",
		"no ENTRYPOINT":           "",
		"an ENV it would not set": "ENTRYPOINT [\"/x\"]\nENV A=b\n",
	} {
		path := filepath.Join(t.TempDir(), "Dockerfile")
		if err := os.WriteFile(path, []byte(base+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readRuntimeStage(path, testVars); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	st, err := finalStage(mustInstructions(t, base+"LABEL a=\"b c\" \\\n  d=${VERSION}\nEXPOSE 1 2/udp\nENTRYPOINT [\"/x\"]\n"), testVars)
	if err != nil || st.Labels["a"] != "b c" || st.Labels["d"] != "v9.8.7" || !slices.Equal(st.Ports, []string{"1/tcp", "2/udp"}) {
		t.Errorf("continued LABEL and EXPOSE: %+v %v", st, err)
	}
}

func mustInstructions(t *testing.T, s string) []instruction {
	t.Helper()
	in, err := instructions(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func buildOne(t *testing.T, created time.Time) v1.Image {
	t.Helper()
	stage, err := readRuntimeStage(repoDockerfile, testVars)
	if err != nil {
		t.Fatal(err)
	}
	images, err := buildImages(stage, options{caFile: caFile(t), created: created,
		binaries: platformBinaries{{"linux", "amd64", fakeBinary(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	return images[0].image
}

// fakeBinary stands in for sidelock: the image tool copies bytes, it never runs them.
func fakeBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sidelock")
	if err := os.WriteFile(path, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func caFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func configDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type entry struct {
	*tar.Header
	content string
}

// filesOf flattens the image's layers as a container runtime would.
func filesOf(t *testing.T, img v1.Image) map[string]*entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]*entry{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(hdr.Name, "/")] = &entry{hdr, string(data)}
	}
}
