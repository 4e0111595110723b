// Command release keeps sidelock's one version and checks its release
// artifacts. VERSION (at the repository's root) is the version; every other
// copy in the tree (the chart, both clients, docs) is written from it.
// From tools/:
//
//	go run ./release check                      # every copy agrees with VERSION (also TestVersionsAgree)
//	go run ./release stamp -version v0.5.0      # rewrite VERSION and every copy (make version)
//	go run ./release stamp -root ../dist/stage -version v0.5.0   # a staged copy (make release)
//	go run ./release verify -dist ../dist -version v0.5.0 -platforms linux/amd64,... -images linux/amd64,...
//
// verify checks that each artifact holds LICENSE and says the version:
// binary archives (this platform's binary is run), the chart, the OCI image
// and its docker-load tarballs (labels), the Python sdist and wheel and the
// npm tarball, and that SHA256SUMS lists them all.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: release check|stamp|verify [flags]")
	}
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	root := fs.String("root", "..", "the tree (or a staged copy of it) holding the version's copies")
	version := fs.String("version", "", "the version, vX.Y.Z (default: VERSION under -root)")
	dist := fs.String("dist", "../dist", "verify: the directory of the artifacts")
	platforms := fs.String("platforms", "", "verify: os/arch of the binary archives, comma-separated")
	images := fs.String("images", "", "verify: os/arch of the image, comma-separated")
	chart := fs.Bool("chart", false, "verify: the packaged chart")
	clients := fs.Bool("clients", false, "verify: the Python sdist and wheel and the npm tarball")
	sums := fs.Bool("sums", false, "verify: SHA256SUMS lists every artifact checked")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	v, err := versionFlag(*version, *root)
	if err != nil {
		return err
	}
	switch args[0] {
	case "check":
		return report(check(*root, v, false))
	case "stamp":
		if err := stamp(*root, v); err != nil {
			return err
		}
		return report(check(*root, v, true))
	case "verify":
		license, err := os.ReadFile(filepath.Join(*root, "LICENSE"))
		if err != nil {
			return err
		}
		errs := verify(artifacts{dir: *dist, version: v, license: license, platforms: list(*platforms), images: list(*images),
			chart: *chart, clients: *clients, sums: *sums})
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		fmt.Printf("release: every artifact in %s holds LICENSE and says %s\n", *dist, v.Tag())
		return nil
	}
	return fmt.Errorf("unknown command %q: check, stamp or verify", args[0])
}

// versionFlag is -version, or VERSION under root.
func versionFlag(flagValue, root string) (Version, error) {
	if flagValue != "" {
		return ParseVersion(flagValue)
	}
	return readVersion(root)
}

func report(ms []mismatch, err error) error {
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return nil
	}
	lines := make([]string, len(ms))
	for i, m := range ms {
		lines[i] = m.String()
	}
	return fmt.Errorf("the version's copies disagree (make version VERSION=vX.Y.Z rewrites them):\n  %s", strings.Join(lines, "\n  "))
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
