package main

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// license is the SPDX expression every artifact declares; each also holds
// the LICENSE file itself, byte for byte.
const license = "Apache-2.0"

// artifacts says what a dist directory must hold.
type artifacts struct {
	dir       string
	version   Version
	license   []byte   // the tree's LICENSE
	platforms []string // os/arch of the binary archives
	images    []string // os/arch of the image (OCI layout and docker-load tarballs)
	chart     bool
	clients   bool // the Python sdist and wheel, the npm tarball
	sums      bool // SHA256SUMS lists every file checked
}

// verify checks every artifact; it returns each problem found, not just
// the first.
func verify(a artifacts) []error {
	var errs []error
	var files []string
	add := func(name string, err error) {
		files = append(files, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	for _, p := range a.platforms {
		goos, arch, _ := strings.Cut(p, "/")
		name := fmt.Sprintf("sidelock_%s_%s_%s.tar.gz", a.version.Tag(), goos, arch)
		add(name, a.binaryArchive(name, goos == runtime.GOOS && arch == runtime.GOARCH))
	}
	if len(a.images) > 0 {
		errs = append(errs, a.ociLayout()...)
	}
	for _, p := range a.images {
		goos, arch, _ := strings.Cut(p, "/")
		name := fmt.Sprintf("sidelock_%s_image_%s_%s.tar", a.version.Tag(), goos, arch)
		add(name, a.imageArchive(name))
	}
	if a.chart {
		name := fmt.Sprintf("sidelock-%s.tgz", a.version.SemVer())
		add(name, a.chartArchive(name))
	}
	if a.clients {
		for _, c := range a.clientArtifacts() {
			add(c.name, c.check())
		}
	}
	if a.sums {
		errs = append(errs, a.checksums(files)...)
	}
	return errs
}

// binaryArchive holds the binary and LICENSE; this platform's binary is
// run and must say its version.
func (a artifacts) binaryArchive(name string, run bool) error {
	files, err := readTarGz(filepath.Join(a.dir, name))
	if err != nil {
		return err
	}
	if err := a.hasLicense(files, "LICENSE"); err != nil {
		return err
	}
	bin, ok := files["sidelock"]
	if !ok {
		return errors.New("no sidelock binary")
	}
	if !run {
		return nil
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("sidelock-verify-%d", os.Getpid()))
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		return err
	}
	defer func() { _ = os.Remove(path) }()
	out, err := exec.Command(path, "version").Output()
	if err != nil {
		return fmt.Errorf("sidelock version: %w", err)
	}
	if f := strings.Fields(string(out)); len(f) < 2 || f[1] != a.version.Tag() {
		return fmt.Errorf("sidelock version says %q, want %s", strings.TrimSpace(string(out)), a.version.Tag())
	}
	return nil
}

// chartArchive is the packaged chart: its version and appVersion, and LICENSE.
func (a artifacts) chartArchive(name string) error {
	files, err := readTarGz(filepath.Join(a.dir, name))
	if err != nil {
		return err
	}
	if err := a.hasLicense(files, "sidelock/LICENSE"); err != nil {
		return err
	}
	chart := string(files["sidelock/Chart.yaml"])
	for field, want := range map[string]string{"version": a.version.SemVer(), "appVersion": a.version.Tag()} {
		m := regexp.MustCompile(`(?m)^` + field + `: "?([^"\s]+)"?$`).FindStringSubmatch(chart)
		if m == nil || m[1] != want {
			return fmt.Errorf("the chart's %s is %v, want %s", field, m, want)
		}
	}
	return nil
}

// ociLayout is the multi-platform image: named by the version, every
// platform's config labelled with the version and the license.
func (a artifacts) ociLayout() []error {
	idx, err := layout.ImageIndexFromPath(filepath.Join(a.dir, "oci"))
	if err != nil {
		return []error{fmt.Errorf("oci: %w", err)}
	}
	outer, err := idx.IndexManifest()
	if err != nil {
		return []error{fmt.Errorf("oci: %w", err)}
	}
	var errs []error
	for _, d := range outer.Manifests {
		if ref := d.Annotations["org.opencontainers.image.ref.name"]; ref != a.version.Tag() {
			errs = append(errs, fmt.Errorf("oci: index named %q, want %s", ref, a.version.Tag()))
		}
		inner, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return append(errs, fmt.Errorf("oci: %w", err))
		}
		im, err := inner.IndexManifest()
		if err != nil {
			return append(errs, fmt.Errorf("oci: %w", err))
		}
		for _, m := range im.Manifests {
			img, err := inner.Image(m.Digest)
			if err == nil {
				err = a.imageLabels(img.ConfigFile)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("oci %s: %w", m.Platform, err))
			}
		}
	}
	return errs
}

// imageArchive is one platform's docker-load tarball.
func (a artifacts) imageArchive(name string) error {
	img, err := tarball.ImageFromPath(filepath.Join(a.dir, name), nil)
	if err != nil {
		return err
	}
	return a.imageLabels(img.ConfigFile)
}

// imageLabels checks an image's version and license labels.
func (a artifacts) imageLabels(config func() (*v1.ConfigFile, error)) error {
	cf, err := config()
	if err != nil {
		return err
	}
	labels := cf.Config.Labels
	if labels["org.opencontainers.image.version"] != a.version.Tag() {
		return fmt.Errorf("label org.opencontainers.image.version %q, want %s", labels["org.opencontainers.image.version"], a.version.Tag())
	}
	if labels["org.opencontainers.image.licenses"] != license {
		return fmt.Errorf("label org.opencontainers.image.licenses %q, want %s", labels["org.opencontainers.image.licenses"], license)
	}
	return nil
}

// clientArtifact is one client package and its check.
type clientArtifact struct {
	name  string
	check func() error
}

// clientArtifacts are the Python sdist and wheel and the npm tarball: each
// holds LICENSE and says the version (and the license) in its metadata,
// and the Python module's __version__ agrees.
func (a artifacts) clientArtifacts() []clientArtifact {
	py := a.version.PEP440()
	sdist := fmt.Sprintf("sidelock-%s.tar.gz", py)
	wheel := fmt.Sprintf("sidelock-%s-py3-none-any.whl", py)
	npm := fmt.Sprintf("sidelock-node-%s.tgz", a.version.SemVer())
	return []clientArtifact{
		{sdist, func() error {
			files, err := readTarGz(filepath.Join(a.dir, sdist))
			if err != nil {
				return err
			}
			top := "sidelock-" + py + "/"
			return a.pythonPackage(files, top+"LICENSE", top+"PKG-INFO", top+"src/sidelock/__init__.py")
		}},
		{wheel, func() error {
			files, err := readZip(filepath.Join(a.dir, wheel))
			if err != nil {
				return err
			}
			info := "sidelock-" + py + ".dist-info/"
			return a.pythonPackage(files, info+"licenses/LICENSE", info+"METADATA", "sidelock/__init__.py")
		}},
		{npm, func() error {
			files, err := readTarGz(filepath.Join(a.dir, npm))
			if err != nil {
				return err
			}
			if err := a.hasLicense(files, "package/LICENSE"); err != nil {
				return err
			}
			var pkg struct{ Name, Version, License string }
			if err := json.Unmarshal(files["package/package.json"], &pkg); err != nil {
				return fmt.Errorf("package.json: %w", err)
			}
			if pkg.Version != a.version.SemVer() || pkg.License != license {
				return fmt.Errorf("package.json says version %q license %q, want %s %s", pkg.Version, pkg.License, a.version.SemVer(), license)
			}
			return nil
		}},
	}
}

// pythonPackage checks a wheel's or an sdist's license file, its core
// metadata (Version, License) and sidelock.__version__.
func (a artifacts) pythonPackage(files map[string][]byte, licensePath, metadataPath, initPath string) error {
	if err := a.hasLicense(files, licensePath); err != nil {
		return err
	}
	raw, ok := files[metadataPath]
	if !ok {
		return fmt.Errorf("no %s", metadataPath)
	}
	meta, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw))).ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", metadataPath, err)
	}
	if meta.Get("Version") != a.version.PEP440() || meta.Get("License") != license {
		return fmt.Errorf("%s says Version %q License %q, want %s %s", metadataPath, meta.Get("Version"), meta.Get("License"), a.version.PEP440(), license)
	}
	want := fmt.Sprintf("__version__ = %q", a.version.PEP440())
	if !bytes.Contains(files[initPath], []byte(want)) {
		return fmt.Errorf("%s lacks %s", initPath, want)
	}
	return nil
}

// hasLicense checks that path holds the tree's LICENSE, byte for byte.
func (a artifacts) hasLicense(files map[string][]byte, path string) error {
	b, ok := files[path]
	if !ok {
		return fmt.Errorf("no %s", path)
	}
	if !bytes.Equal(b, a.license) {
		return fmt.Errorf("%s is not the tree's LICENSE", path)
	}
	return nil
}

// checksums checks that SHA256SUMS lists each file with its digest.
func (a artifacts) checksums(files []string) []error {
	raw, err := os.ReadFile(filepath.Join(a.dir, "SHA256SUMS"))
	if err != nil {
		return []error{err}
	}
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if sum, name, ok := strings.Cut(line, "  "); ok {
			listed[name] = sum
		}
	}
	var errs []error
	for _, name := range files {
		b, err := os.ReadFile(filepath.Join(a.dir, name))
		if err != nil {
			continue // reported by its own check
		}
		sum := sha256.Sum256(b)
		if listed[name] != hex.EncodeToString(sum[:]) {
			errs = append(errs, fmt.Errorf("SHA256SUMS: %s listed as %q, is %x", name, listed[name], sum))
		}
	}
	for name := range listed {
		if !slices.Contains(files, name) {
			errs = append(errs, fmt.Errorf("SHA256SUMS lists %s, which no check covers", name))
		}
	}
	return errs
}

// readTarGz is every regular file of a .tar.gz by name ("./" dropped).
func readTarGz(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[strings.TrimPrefix(h.Name, "./")] = b
	}
}

// readZip is every file of a zip (a wheel) by name.
func readZip(path string) (map[string][]byte, error) {
	z, err := zip.OpenReader(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = z.Close() }()
	files := map[string][]byte{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		files[f.Name] = b
	}
	return files, nil
}
