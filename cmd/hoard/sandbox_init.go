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
// jail up, drops its privileges and execs PROGRAM, with its own
// environment; it returns (exit 1, the reason on stderr) only when that
// fails. It is not listed among the commands: nobody runs it by hand.
func runSandboxInit(args []string, stderr io.Writer) int {
	j, argv, err := sandbox.ParseInitArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "hoard %s: %v\n", sandbox.InitCommand, err)
		return 2
	}
	err = sandbox.Enter(j, argv, os.Environ())
	fmt.Fprintf(stderr, "hoard %s: %v\n", sandbox.InitCommand, err)
	return 1
}
