// Package images builds the container images that the single-node
// Kubernetes e2e harness runs, as archives for `ctr -n k8s.io images
// import`. The harness has no registry and no network beyond the Go module
// proxy and Debian's archive, so nothing can be pulled: every image a pod
// or the container runtime needs is built here, on the node, from a Go
// program or from this machine's own Debian binaries, and imported into
// containerd before the kubelet asks for it (pods must then use
// imagePullPolicy IfNotPresent or Never).
//
//   - Pause (docker.io/sidelock-e2e/pause:local): the pod sandbox image that
//     containerd's CRI starts first in every pod (its sandbox_image). One
//     static Go binary, /pause (./pause), run as 65535: it blocks, reaps
//     zombies and exits 0 on SIGINT or SIGTERM, as registry.k8s.io/pause.
//   - Tools (docker.io/sidelock-e2e/tools:local): one image for the Redis
//     masters of the Helm chart (its redis.image) and for the test and
//     application pods (its tests.image). Debian's static busybox as /bin/sh
//     and the usual applets in /bin, redis-server and redis-cli (Debian's
//     redis-tools) and curl in /usr/bin with the shared libraries they load
//     and the dynamic loader, /etc/passwd and /etc/group with root (0),
//     redis (999), nonroot (65532) and nobody (65534), the CA bundle, /tmp
//     (1777) and /data (999:999). PATH is /usr/local/bin:/usr/bin:/bin, the
//     command sh; no entrypoint and no user (root), the pods say whom to
//     run as. It runs with a read-only root file system.
//
// Both are single-platform images of this machine's architecture, written
// as docker-archive tarballs (what `docker save` writes) tagged with their
// reference; every time stamp is the Unix epoch, so that equal inputs give
// equal image IDs.
package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// References the archives import as (fully qualified, as containerd and
// the kubelet name images).
const (
	PauseRef = "docker.io/sidelock-e2e/pause:local"
	ToolsRef = "docker.io/sidelock-e2e/tools:local"
)

// Archive is an image written to a file.
type Archive struct {
	// Path is a docker-archive tarball that `ctr images import` accepts.
	Path string
	// Ref is the reference the image is tagged with in the archive, and
	// so in containerd once imported.
	Ref string
}

// created is every time stamp of the images and their files.
var created = time.Unix(0, 0).UTC()

// Users of the tools image.
const (
	redisUID   = 999   // the chart's masters (uid of the official redis image)
	nonrootUID = 65532 // the helm test pod (distroless's nonroot)
	nobodyUID  = 65534
	pauseUID   = 65535 // registry.k8s.io/pause's user
)

// toolsPath is the PATH of the tools image.
const toolsPath = "/usr/local/bin:/usr/bin:/bin"

// pausePackage is the pause program, built from this module.
const pausePackage = "github.com/sidelock/sidelock/test/k8s-e2e/node/images/pause"

// Pause builds ./pause (static, CGO_ENABLED=0, -trimpath) into dir and
// writes the pause image, entrypoint /pause and user 65535, to
// dir/pause.tar. It runs the go command, from within this module.
func Pause(ctx context.Context, dir string) (Archive, error) {
	bin := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pausePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return Archive{}, fmt.Errorf("go build pause: %w\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return Archive{}, err
	}
	t := tree{}
	t.file("/pause", 0o755, data)
	img, err := imageOf(v1.Config{
		Entrypoint: []string{"/pause"},
		User:       fmt.Sprintf("%d:%d", pauseUID, pauseUID),
	}, layerSpec{t, "COPY pause /pause"})
	if err != nil {
		return Archive{}, err
	}
	return writeArchive(filepath.Join(dir, "pause.tar"), PauseRef, img)
}

// hostFile is a file the tools image copies from this machine, and the
// Debian package that installs it.
type hostFile struct {
	paths []string // where to look, first found wins
	pkg   string
}

var (
	busyboxFile = hostFile{[]string{"/bin/busybox", "/usr/bin/busybox"}, "busybox-static"}
	// redis-server is redis-check-rdb under another name (Redis picks its
	// mode from argv[0]); redis-tools has it, the redis-server package
	// only adds the link and a service this does not want started.
	redisServerFile = hostFile{[]string{"/usr/bin/redis-server", "/usr/bin/redis-check-rdb"}, "redis-tools"}
	redisCLIFile    = hostFile{[]string{"/usr/bin/redis-cli"}, "redis-tools"}
	curlFile        = hostFile{[]string{"/usr/bin/curl"}, "curl"}
	lddFile         = hostFile{[]string{"/usr/bin/ldd", "/bin/ldd"}, "libc-bin"}
)

// checkHostFiles says which Debian packages to install for the files this
// machine lacks (make e2e-node installs them).
func checkHostFiles(files ...hostFile) error {
	var missing []string
	for _, f := range files {
		if _, ok := f.find(); !ok && !slices.Contains(missing, f.pkg) {
			missing = append(missing, f.pkg)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("images: missing Debian packages %s: run make e2e-node, which installs them, or apt-get install %s",
			strings.Join(missing, ", "), strings.Join(missing, " "))
	}
	return nil
}

// find returns the first of the paths that exists.
func (h hostFile) find() (string, bool) {
	for _, p := range h.paths {
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// requiredApplets must be busybox applets; the image links every applet
// the busybox has into /bin, these are the ones the chart (masters, helm
// test) and the scenarios' scripts use.
var requiredApplets = []string{
	"sh", "sleep", "sed", "cat", "echo", "printf", "test", "[", "rm",
	"awk", "adjtimex", "hostname", "nslookup",
}

// Tools writes the tools image (see the package documentation) to
// dir/tools.tar. Its binaries come from this machine's Debian packages
// (busybox-static, redis-tools, curl); it fails naming those missing.
func Tools(ctx context.Context, dir string) (Archive, error) {
	if err := checkHostFiles(busyboxFile, redisServerFile, redisCLIFile, curlFile, lddFile); err != nil {
		return Archive{}, err
	}
	base, err := toolsBase(ctx)
	if err != nil {
		return Archive{}, err
	}
	bins := tree{}
	for _, b := range []struct {
		host  hostFile
		image string
	}{
		{redisServerFile, "/usr/bin/redis-server"},
		{redisCLIFile, "/usr/bin/redis-cli"},
		{curlFile, "/usr/bin/curl"},
	} {
		p, _ := b.host.find()
		if err := bins.copyHost(b.image, p); err != nil {
			return Archive{}, err
		}
		libs, err := sharedLibraries(ctx, p)
		if err != nil {
			return Archive{}, err
		}
		for _, lib := range libs {
			if err := bins.copyHost(lib, lib); err != nil {
				return Archive{}, err
			}
		}
	}
	img, err := imageOf(v1.Config{
		Env: []string{"PATH=" + toolsPath},
		Cmd: []string{"sh"},
	},
		layerSpec{base, "busybox, users, groups, CA certificates, /tmp, /data"},
		layerSpec{bins, "redis-server, redis-cli, curl and their shared libraries"})
	if err != nil {
		return Archive{}, err
	}
	return writeArchive(filepath.Join(dir, "tools.tar"), ToolsRef, img)
}

// toolsBase is the first layer of the tools image: the directories, the
// files of /etc and busybox with its applets.
func toolsBase(ctx context.Context) (tree, error) {
	t := tree{}
	t.dir("/tmp", 0o1777, 0, 0)
	t.dir("/root", 0o700, 0, 0)
	t.dir("/data", 0o755, redisUID, redisUID)
	t.dir("/home/nonroot", 0o755, nonrootUID, nonrootUID)
	t.dir("/usr/local/bin", 0o755, 0, 0)
	t.dir("/etc/redis", 0o755, 0, 0) // the chart mounts its ConfigMap here
	passwd := fmt.Sprintf(`root:x:0:0:root:/root:/bin/sh
redis:x:%[1]d:%[1]d:redis:/data:/bin/false
nonroot:x:%[2]d:%[2]d:nonroot:/home/nonroot:/bin/false
nobody:x:%[3]d:%[3]d:nobody:/nonexistent:/bin/false
`, redisUID, nonrootUID, nobodyUID)
	group := fmt.Sprintf("root:x:0:\nredis:x:%d:\nnonroot:x:%d:\nnobody:x:%d:\n", redisUID, nonrootUID, nobodyUID)
	t.file("/etc/passwd", 0o644, []byte(passwd))
	t.file("/etc/group", 0o644, []byte(group))
	t.file("/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files dns\n"))
	const ca = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(ca); err == nil {
		if err := t.copyHost(ca, ca); err != nil {
			return nil, err
		}
	}

	bb, _ := busyboxFile.find()
	if err := t.copyHost("/bin/busybox", bb); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, bb, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", bb, err)
	}
	applets := map[string]bool{}
	for _, a := range strings.Fields(string(out)) {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		applets[a] = true
		t.symlink("/bin/"+a, "busybox")
	}
	var missing []string
	for _, a := range requiredApplets {
		if !applets[a] {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s lacks the applets %s", bb, strings.Join(missing, " "))
	}
	// Scripts with #!/usr/bin/env.
	t.symlink("/usr/bin/env", "../../bin/busybox")
	return t, nil
}

// sharedLibraries lists, with ldd, the absolute paths of the shared
// libraries an executable loads, its dynamic loader included; none for a
// static one.
func sharedLibraries(ctx context.Context, exe string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", exe).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w\n%s", exe, err, out)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)",
		// "/lib64/ld-linux-x86-64.so.2 (0x...)", "linux-vdso.so.1 (0x...)".
		lib := line
		if _, right, ok := strings.Cut(line, "=>"); ok {
			lib = strings.TrimSpace(right)
			if strings.HasPrefix(lib, "not found") {
				return nil, fmt.Errorf("ldd %s: %s", exe, line)
			}
		}
		lib, _, _ = strings.Cut(lib, " ")
		if path.IsAbs(lib) {
			libs = append(libs, lib)
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s: no library in %q", exe, out)
	}
	return libs, nil
}

// entry is one file of a layer.
type entry struct {
	typ      byte // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	mode     int64
	uid, gid int
	data     []byte
	link     string
}

// tree is the content of a layer, by absolute path.
type tree map[string]entry

func (t tree) dir(p string, mode int64, uid, gid int) {
	t[p] = entry{typ: tar.TypeDir, mode: mode, uid: uid, gid: gid}
}

func (t tree) file(p string, mode int64, data []byte) {
	t[p] = entry{typ: tar.TypeReg, mode: mode, data: data}
}

func (t tree) symlink(p, target string) {
	t[p] = entry{typ: tar.TypeSymlink, mode: 0o777, link: target}
}

// copyHost adds the host file at src (its target, if a symbolic link) as
// dst, with src's permissions, owned by root.
func (t tree) copyHost(dst, src string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	t.file(dst, int64(fi.Mode().Perm()), data)
	return nil
}

// layer writes the tree as a tar, parents before children, every missing
// parent directory added (0755, root), every time stamp created.
func (t tree) layer() (v1.Layer, error) {
	all := tree{}
	for p, e := range t {
		all[p] = e
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := t[d]; !ok {
				all[d] = entry{typ: tar.TypeDir, mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths) // "/a" sorts before "/a/b"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := all[p]
		hdr := &tar.Header{
			Typeflag: e.typ,
			Name:     strings.TrimPrefix(p, "/"),
			Linkname: e.link,
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.gid,
			Size:     int64(len(e.data)),
			ModTime:  created,
			Format:   tar.FormatPAX,
		}
		if e.typ == tar.TypeDir {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
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

// layerSpec is a layer of an image and what its history says of it.
type layerSpec struct {
	files tree
	what  string
}

// imageOf makes a linux image of this machine's architecture.
func imageOf(cfg v1.Config, layers ...layerSpec) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		OS:           "linux",
		Architecture: runtime.GOARCH,
		Config:       cfg,
		RootFS:       v1.RootFS{Type: "layers"}, // mutate.Append adds the diff IDs
	})
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		layer, err := l.files.layer()
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History: v1.History{
				Created:   v1.Time{Time: created},
				CreatedBy: "images: " + l.what,
				Comment:   "test/k8s-e2e/node/images",
			},
		})
		if err != nil {
			return nil, err
		}
	}
	return mutate.CreatedAt(img, v1.Time{Time: created})
}

// writeArchive writes img as a docker-archive tarball tagged ref.
func writeArchive(file, ref string, img v1.Image) (Archive, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return Archive{}, err
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		return Archive{}, fmt.Errorf("write %s: %w", file, err)
	}
	return Archive{Path: file, Ref: ref}, nil
}
