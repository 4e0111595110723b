// Command coredns is CoreDNS with only the plugins make e2e-node's cluster
// needs (cluster DNS from the API server: kubernetes; bind, ready, health,
// errors, log, cache),
// built from the Go module proxy as a custom CoreDNS build is meant to be:
// coremain with a chosen plugin list.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order plugins run in, a subset of CoreDNS's plugin.cfg order.
func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
