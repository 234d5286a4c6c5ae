// Module images is the project's image builder (make images): it writes
// OCI image archives from directories the Makefile prepares, with
// go-containerregistry, reproducibly and without a registry or a daemon.
// A module of its own keeps its dependencies out of the main module.
module github.com/hoard-io/hoard/deploy/images

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
