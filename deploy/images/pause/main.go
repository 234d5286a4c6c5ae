// Command pause is the pod sandbox's process of the images `make images`
// builds (the pause image), for clusters that cannot pull the upstream
// one: it waits for SIGTERM or SIGINT and exits 0.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
