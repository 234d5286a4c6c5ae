package main

import (
	"context"
	"fmt"
	"io"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fmt.Errorf("%w: no benchmarks yet", errUsage)
}
