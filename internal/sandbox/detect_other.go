//go:build !linux

package sandbox

import (
	"log/slog"
	"runtime"
)

// detect: memory cgroups are a Linux feature.
func detect(string, *slog.Logger) (backend, string) {
	return nil, "memory cgroups need Linux (this is " + runtime.GOOS + ")"
}
