// Command imagebuild assembles sidelock's OCI image without a container
// engine: a scratch image holding the static binary, /etc/passwd and
// /etc/group naming the non-root user, and the CA certificates (for TLS to
// masters). The user, entrypoint, ports and labels come from the
// Dockerfile's runtime stage, so both ways of building describe one image.
// From tools/ (make release):
//
//	go run ./imagebuild -dockerfile ../Dockerfile -version v1.2.3 -revision abc123 \
//	    -bin linux/amd64=../dist/build/linux_amd64/sidelock -bin linux/arm64=../dist/build/linux_arm64/sidelock \
//	    -oci ../dist/oci -archive ../dist/sidelock_v1.2.3_image_%s_%s.tar -tag ghcr.io/sidelock/sidelock:v1.2.3
//
// It writes an OCI image layout (one multi-platform index, named by the
// version) and, per platform, a tarball that `docker load` and `podman load`
// read.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "imagebuild: %v\n", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	dockerfile string
	version    string
	revision   string
	caFile     string
	binaries   platformBinaries
	ociDir     string
	archive    string // a pattern with %s for os and arch; "" for none
	tag        string
	created    time.Time
}

func run(args []string) error {
	opts, err := parseOptions(args)
	if err != nil {
		return err
	}
	stage, err := readRuntimeStage(opts.dockerfile, map[string]string{"VERSION": opts.version, "REVISION": opts.revision})
	if err != nil {
		return err
	}
	images, err := buildImages(stage, opts)
	if err != nil {
		return err
	}
	if err := writeLayout(opts.ociDir, opts.version, images); err != nil {
		return err
	}
	if opts.archive != "" {
		return writeArchives(opts.archive, opts.tag, images)
	}
	return nil
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.StringVar(&o.dockerfile, "dockerfile", "../Dockerfile", "the Dockerfile whose runtime stage describes the image")
	fs.StringVar(&o.version, "version", "", "the version stamped in the binaries (label org.opencontainers.image.version, layout ref name)")
	fs.StringVar(&o.revision, "revision", "", "the source revision (label org.opencontainers.image.revision)")
	fs.StringVar(&o.caFile, "ca", "/etc/ssl/certs/ca-certificates.crt", "CA bundle copied into the image (Debian's ca-certificates)")
	fs.Var(&o.binaries, "bin", "os/arch=path of a static binary; repeat per platform")
	fs.StringVar(&o.ociDir, "oci", "", "directory of the OCI image layout to write (replaced)")
	fs.StringVar(&o.archive, "archive", "", "path pattern (%s os, %s arch) of the per-platform tarballs for docker/podman load")
	fs.StringVar(&o.tag, "tag", "", "the image reference the tarballs carry, e.g. ghcr.io/sidelock/sidelock:v1.2.3")
	epoch := fs.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "creation time, seconds since 1970 (reproducible builds)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.version == "" || o.revision == "":
		return o, errors.New("-version and -revision are required")
	case len(o.binaries) == 0:
		return o, errors.New("no -bin")
	case o.ociDir == "":
		return o, errors.New("-oci is required")
	case o.archive != "" && o.tag == "":
		return o, errors.New("-archive needs -tag")
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil {
		return o, fmt.Errorf("-source-date-epoch %q: %w", *epoch, err)
	}
	o.created = time.Unix(secs, 0).UTC()
	return o, nil
}

// platformBinary is one -bin flag.
type platformBinary struct {
	os, arch, path string
}

type platformBinaries []platformBinary

func (p *platformBinaries) String() string { return fmt.Sprint(*p) }

func (p *platformBinaries) Set(s string) error {
	platform, path, ok := strings.Cut(s, "=")
	goos, arch, ok2 := strings.Cut(platform, "/")
	if !ok || !ok2 || path == "" {
		return fmt.Errorf("want os/arch=path, got %q", s)
	}
	*p = append(*p, platformBinary{goos, arch, path})
	return nil
}
