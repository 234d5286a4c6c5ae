// Package archtest checks the package layering that docs/ARCHITECTURE.md
// describes: every package of the module has a layer, and no package
// depends on one above it. It has no code; its test runs `go list -deps`.
package archtest
