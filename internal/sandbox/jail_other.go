//go:build !linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"runtime"
)

// Cloneflags: namespaces are a Linux feature.
func (j *Jail) Cloneflags() uintptr { return 0 }

// Enter fails: jails need Linux.
func Enter(*Jail, []string, []string) (int, error) { return 0, errNotLinux() }

// Network is unavailable off Linux.
type Network struct{}

// NewNetwork fails: jails need Linux.
func NewNetwork() (*Network, error) { return nil, errNotLinux() }

// Namespace is nil.
func (n *Network) Namespace() *os.File { return nil }

// Listener is nil.
func (n *Network) Listener() *os.File { return nil }

// Endpoint is empty.
func (n *Network) Endpoint() string { return "" }

// Close does nothing.
func (n *Network) Close() error { return nil }

// Probe fails: jails need Linux.
func Probe(context.Context, string) error { return errNotLinux() }

// SystemPaths is empty.
func SystemPaths() []string { return nil }

func errNotLinux() error {
	return fmt.Errorf("%w: namespaces need Linux (this is %s)", ErrNoIsolation, runtime.GOOS)
}

// LimitTasks fails: cgroups need Linux.
func (s *Sandbox) LimitTasks(int, TaskLimits) error { return errNotLinux() }

// TaskCgroups fails: cgroups need Linux.
func (s *Sandbox) TaskCgroups(TaskLimits) ([]string, error) { return nil, errNotLinux() }

// CgroupProcs is empty: cgroups need Linux.
func (s *Sandbox) CgroupProcs() string { return "" }

func (s *Sandbox) removeTaskDirs() error { return nil }
