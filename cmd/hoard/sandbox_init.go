package main

import (
	"fmt"
	"io"
	"os"

	"github.com/hoard-io/hoard/internal/sandbox"
)

// runSandboxInit is the hidden `hoard sandbox-init SPEC -- PROGRAM
// [ARG...]`: the first process of a function's jail, which the node
// agent starts in fresh namespaces (package sandbox, Jail). It sets the
// jail up, drops its privileges and runs PROGRAM, with its own
// environment, staying as the jail's init to reap orphans; it exits with
// PROGRAM's status, or 1 with the reason on stderr when the jail could
// not be entered. It is not listed among the commands: nobody runs it by
// hand.
func runSandboxInit(args []string, stderr io.Writer) int {
	j, argv, err := sandbox.ParseInitArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "hoard %s: %v\n", sandbox.InitCommand, err)
		return 2
	}
	status, err := sandbox.Enter(j, argv, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "hoard %s: %v\n", sandbox.InitCommand, err)
		return 1
	}
	return status
}
