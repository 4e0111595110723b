// Package container runs sidelock's release image as a real container:
// the OCI layout that `make release` writes (tools/imagebuild), unpacked
// into a runc bundle and started with runc, against real redis-server
// masters (make image-test). It is a module of its own so that the image
// and runtime-spec libraries stay out of the binary's go.mod.
package container
