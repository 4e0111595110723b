// Command pause is the pod sandbox ("pause") process of the node e2e
// harness, what registry.k8s.io/pause runs: it holds the pod's namespaces
// open by blocking forever, reaps the zombies it inherits as the pod's
// PID 1 (shared process namespace), and exits 0 on SIGINT or SIGTERM.
//
// It is built by the images package (images.Pause), static and without
// dependencies.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (sidelock e2e)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			reap()
		default:
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", sig)
			os.Exit(0)
		}
	}
}

// reap waits for every child that has exited; signals coalesce, so one
// SIGCHLD may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
