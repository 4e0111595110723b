// Command floor serves package floor's thinnest lock sidecar (or, with
// -http-only, its routes with no Redis) on a loopback port, so that
// tools/bench can measure its process's CPU beside sidelock's. It prints
// "listening on http://ADDR" once it accepts connections, and stops on
// SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/tools/floor"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run() error {
	masters := flag.String("masters", "", "comma-separated host:port of the Redis masters")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	httpOnly := flag.Bool("http-only", false, "answer without Redis: the HTTP exchange alone")
	prefix := flag.String("prefix", "floor:", "key prefix on the masters")
	releaseAfter := flag.Bool("release-after", false, "answer DELETE before its release round (issue 30, item 2)")
	flag.Parse()
	handler := floor.HTTPOnly()
	if !*httpOnly {
		if *masters == "" {
			return errors.New("-masters is required without -http-only")
		}
		var clients []*redis.Client
		for _, addr := range strings.Split(*masters, ",") {
			c := floor.NewClient(addr)
			defer func() { _ = c.Close() }()
			clients = append(clients, c)
		}
		handler = floor.Handler(floor.NewLocker(clients, *prefix))
		if *releaseAfter {
			handler = floor.HandlerReleasingAfter(floor.NewLocker(clients, *prefix))
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: handler}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	fmt.Printf("listening on http://%s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
