// Package imagebuild builds holdfast's container image without a
// container engine, and runs it the way a container runtime would where
// none is installed. It is a module of its own so that the image library
// (go-containerregistry) stays out of holdfast's module graph; holdfast
// must not import it.
//
// Build puts a static holdfast binary, the default configuration, the
// non-root user's passwd and group entries and the build machine's CA
// certificates into an image of three layers on an empty base, with no
// shell and no package manager; WriteArchive writes it as one tar file
// that is both an OCI image layout (podman load, skopeo oci-archive:,
// crane push) and a docker save archive (docker load). Its layout (paths,
// user, entrypoint, ports) is in layout.go; deploy/Dockerfile builds the
// same image for those with a container engine, and the tests check that
// the two agree.
//
// Prepare unpacks an image into a directory and Run starts its
// entrypoint there as the image says: its Entrypoint and Cmd, its Env and
// WorkingDir, as its User, with the directory as its root (chroot) and
// /proc mounted in a mount namespace of its own. It needs root, as a
// container runtime does; it shares the host's network, as
// `docker run --network host` does.
//
// make image and make image-run drive it through cmd/holdfast-image.
package imagebuild
