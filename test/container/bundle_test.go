package container

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// refNameAnnotation names an entry of an OCI layout's index.json.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// hostPlatformImage opens the OCI layout at dir and returns the image of
// this machine's platform, from the entry named ref (or the only entry).
func hostPlatformImage(t *testing.T, dir, ref string) v1.Image {
	t.Helper()
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("OCI layout %s: %v", dir, err)
	}
	top, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var entry *v1.Descriptor
	for i, m := range top.Manifests {
		if ref == "" && len(top.Manifests) == 1 || ref != "" && m.Annotations[refNameAnnotation] == ref {
			entry = &top.Manifests[i]
		}
	}
	if entry == nil {
		t.Fatalf("OCI layout %s: no entry named %q in index.json", dir, ref)
	}
	idx, err := root.ImageIndex(entry.Digest)
	if err != nil {
		t.Fatalf("entry %q is not a multi-platform index: %v", ref, err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range manifest.Manifests {
		if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
			img, err := idx.Image(m.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("image %q has no linux/%s manifest", ref, runtime.GOARCH)
	return nil
}

// unpack writes the image's flattened file system into rootfs, as a
// container runtime does, keeping modes and owners.
func unpack(t *testing.T, img v1.Image, rootfs string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("reading the image's layers: %v", err)
		}
		if err := unpackEntry(rootfs, hdr, tr); err != nil {
			t.Fatalf("unpacking %s: %v", hdr.Name, err)
		}
	}
}

func unpackEntry(rootfs string, hdr *tar.Header, r io.Reader) error {
	if !filepath.IsLocal(hdr.Name) {
		return fmt.Errorf("path leaves the root file system")
	}
	path := filepath.Join(rootfs, hdr.Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(hdr.Mode).Perm()
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(path, mode); err != nil {
			return err
		}
	case tar.TypeReg:
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.Symlink(hdr.Linkname, path); err != nil {
			return err
		}
	default:
		return fmt.Errorf("entry type %q not handled", hdr.Typeflag)
	}
	if err := os.Lchown(path, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeSymlink {
		return os.Chmod(path, mode) // MkdirAll and OpenFile applied the umask
	}
	return nil
}

// imageUser reads the image's numeric USER uid:gid.
func imageUser(t *testing.T, cfg v1.Config) (uid, gid uint32) {
	t.Helper()
	u, g, ok := strings.Cut(cfg.User, ":")
	uid64, err1 := strconv.ParseUint(u, 10, 32)
	gid64, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("image USER %q is not a numeric uid:gid", cfg.User)
	}
	return uint32(uid64), uint32(gid64)
}

// writeSpec writes the bundle's config.json: the image's own entrypoint,
// command, user, working directory and environment (plus env), the way a
// pod's securityContext runs the sidecar (readOnlyRootFilesystem, no
// privilege escalation, every capability dropped), and no network
// namespace of its own: the container shares the host's, so its 127.0.0.1
// is the host's loopback, as the app and the sidecar share one in a pod.
func writeSpec(t *testing.T, bundle string, cfg v1.Config, env []string) {
	t.Helper()
	uid, gid := imageUser(t, cfg)
	cwd := cfg.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	spec := specs.Spec{
		Version:  "1.0.2",
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: "sidelock-image-test",
		Process: &specs.Process{
			User:            specs.User{UID: uid, GID: gid},
			Args:            append(append([]string{}, cfg.Entrypoint...), cfg.Cmd...),
			Env:             append(append([]string{}, cfg.Env...), env...),
			Cwd:             cwd,
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{}, // every set empty: all dropped
		},
		Mounts: defaultMounts(),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
			},
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
				"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
				"/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// defaultMounts are those of `runc spec`, /sys read-only as in a pod.
func defaultMounts() []specs.Mount {
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
}
