// Command etcd is etcd's own server, built from the Go module proxy so that
// the end-to-end tests need no downloaded release binaries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
