package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// caPath is where Go's crypto/x509 looks first on Linux, and where the
	// distroless base of the Dockerfile keeps the bundle (SSL_CERT_FILE).
	caPath = "/etc/ssl/certs/ca-certificates.crt"
	// userName names the non-root uid in /etc/passwd, as in distroless.
	userName = "nonroot"
	// refNameAnnotation names the index in the layout's index.json
	// (what `skopeo copy oci:DIR:NAME` and `umoci unpack --image DIR:NAME` select).
	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// defaultPath is the PATH every image engine sets when the image has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// platformImage is the image of one platform.
type platformImage struct {
	platform v1.Platform
	image    v1.Image
}

// buildImages makes one image per -bin: a base layer shared by all
// platforms (users, groups, CA certificates) and a layer with the binary.
func buildImages(stage runtimeStage, opts options) ([]platformImage, error) {
	uid, gid, err := numericUser(stage.User)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(opts.caFile)
	if err != nil {
		return nil, fmt.Errorf("CA certificates (Debian's ca-certificates package): %w", err)
	}
	base, err := layerOf(opts.created, baseFiles(uid, gid, ca))
	if err != nil {
		return nil, err
	}
	var images []platformImage
	for _, b := range opts.binaries {
		img, err := platformImageOf(stage, opts.created, base, b)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", b.os, b.arch, err)
		}
		images = append(images, platformImage{v1.Platform{OS: b.os, Architecture: b.arch}, img})
	}
	return images, nil
}

func platformImageOf(stage runtimeStage, created time.Time, base v1.Layer, b platformBinary) (v1.Image, error) {
	binary, err := os.ReadFile(b.path)
	if err != nil {
		return nil, err
	}
	top, err := layerOf(created, []file{{path: stage.Binary, mode: 0o755, data: binary}})
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		OS:           b.os,
		Architecture: b.arch,
		Config:       containerConfig(stage),
		RootFS:       v1.RootFS{Type: "layers"}, // mutate.Append adds the diff IDs
	})
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: history(created, "users, groups and CA certificates")},
		mutate.Addendum{Layer: top, MediaType: types.OCILayer, History: history(created, "COPY sidelock "+stage.Binary)})
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: created})
}

// containerConfig is the runtime stage as image configuration; Env is what
// the Dockerfile's distroless base sets.
func containerConfig(stage runtimeStage) v1.Config {
	ports := map[string]struct{}{}
	for _, p := range stage.Ports {
		ports[p] = struct{}{}
	}
	return v1.Config{
		User:         stage.User,
		Entrypoint:   stage.Entrypoint,
		ExposedPorts: ports,
		Env:          []string{"PATH=" + defaultPath, "SSL_CERT_FILE=" + caPath},
		Labels:       stage.Labels,
	}
}

func history(created time.Time, what string) v1.History {
	return v1.History{Created: v1.Time{Time: created}, CreatedBy: "imagebuild: " + what, Comment: "tools/imagebuild"}
}

// numericUser reads USER uid:gid; the kubelet can only check runAsNonRoot
// against a numeric user, so a name is refused.
func numericUser(user string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid == 0 {
		return 0, 0, fmt.Errorf("USER %q: want a numeric non-root uid:gid", user)
	}
	return uid, gid, nil
}

// file is one entry of a layer; a path ending in "/" is a directory.
type file struct {
	path string
	mode int64
	data []byte
}

// baseFiles are the few files a static Go binary needs from an OS: who the
// user is (libraries and tools that look it up) and the CA certificates.
func baseFiles(uid, gid int, ca []byte) []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/nonexistent:/sbin/nologin\n", userName, uid, gid, userName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, gid)
	return []file{
		{path: "/etc/", mode: 0o755},
		{path: "/etc/group", mode: 0o644, data: []byte(group)},
		{path: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "/etc/ssl/", mode: 0o755},
		{path: "/etc/ssl/certs/", mode: 0o755},
		{path: caPath, mode: 0o644, data: ca},
	}
}

// layerOf writes files into a tar owned by root, every time stamp the
// build's creation time, so the same inputs give the same digests.
func layerOf(created time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(f.path, "/"),
			Mode:    f.mode,
			ModTime: created,
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(f.path, "/") {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// writeLayout replaces dir with an OCI image layout whose index.json holds
// one entry: the multi-platform index, named by the version.
func writeLayout(dir, version string, images []platformImage) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range images {
		platform := pi.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        pi.image,
			Descriptor: v1.Descriptor{Platform: &platform},
		})
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: version}))
}

// writeArchives writes one `docker load` tarball per platform (that format
// holds one platform's image).
func writeArchives(pattern, tag string, images []platformImage) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	for _, pi := range images {
		path := fmt.Sprintf(pattern, pi.platform.OS, pi.platform.Architecture)
		if err := tarball.WriteToFile(path, ref, pi.image); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}
