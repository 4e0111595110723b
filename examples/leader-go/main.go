// Command leader-go is leader election with pkg/client: a standby that
// campaigns for a lock, knows who leads meanwhile (a watch of the lock),
// and does the singleton work only while it leads.
//
// Run two of them against `make run`, each in a terminal of its own:
//
//	go run ./examples/leader-go -id a
//	go run ./examples/leader-go -id b
//
// One is elected and works, printing its term (the lock's fence); the
// other prints who leads. Stop the leader with Ctrl-C: it resigns (closes
// its stream) and the standby is elected at once. Kill it with kill -9:
// its sidecar releases the lock as the connection closes (a whole pod
// that dies frees it within one key TTL, 10s by default).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

func main() {
	host, _ := os.Hostname()
	id := flag.String("id", host+"-"+strconv.Itoa(os.Getpid()), "this candidate's name, which the others see as the leader")
	name := flag.String("name", "examples/leader", "the election's lock")
	every := flag.Duration("every", time.Second, "how often the leader does its work")
	flag.Parse()
	addr := os.Getenv("SIDELOCK_ADDR")
	if addr == "" {
		addr = client.DefaultAddr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	c := client.New(addr, nil).WithToken(os.Getenv("SIDELOCK_API_TOKEN"))
	err := run(ctx, c, candidate{name: *name, id: *id, every: *every}, os.Stdout)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// candidate is one process standing for election.
type candidate struct {
	name  string        // the election's lock
	id    string        // the lock's owner while this one leads
	every time.Duration // the singleton work's period
}

// run stands for election until ctx ends: it follows the leader while on
// standby and works while it leads. Every line goes to out.
func run(ctx context.Context, c *client.Client, cand candidate, out io.Writer) error {
	out = &lockedWriter{w: out} // the watch and the work print concurrently
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // stops the watch, then wg.Wait sees it end
	wg.Go(func() { followLeader(ctx, c, cand, out) })
	for {
		held, err := c.Campaign(ctx, cand.name, client.Options{Owner: cand.id})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("campaigning for %s: %w", cand.name, err)
		}
		lead(ctx, held, cand, out)
	}
}

// lead does the singleton work until the term ends: ctx ends (resign) or
// the lock is lost. The fence is the term: pass it to whatever the work
// writes, so that a store can refuse a deposed leader's late writes
// (examples/fenced-resource).
func lead(ctx context.Context, held *client.Held, cand candidate, out io.Writer) {
	defer held.Release() // resigns: the standby is elected at once
	term := held.Lease.Fence
	fmt.Fprintf(out, "%s: elected, term %d\n", cand.id, term)
	tick := time.NewTicker(cand.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintf(out, "%s: resigning, term %d\n", cand.id, term)
			return
		case <-held.Done():
			fmt.Fprintf(out, "%s: term %d over: %s %s\n", cand.id, term, held.End().Kind, held.End().Reason)
			return
		case <-tick.C:
			fmt.Fprintf(out, "%s: term %d: working\n", cand.id, term)
		}
	}
}

// followLeader says who leads whenever it changes, until ctx ends.
func followLeader(ctx context.Context, c *client.Client, cand candidate, out io.Writer) {
	w, err := c.Watch(ctx, cand.name)
	if err != nil {
		fmt.Fprintf(out, "%s: cannot watch %s: %v\n", cand.id, cand.name, err)
		return
	}
	for ch := range w.Changes() {
		switch {
		case ch.Held:
			fmt.Fprintf(out, "%s: leader is %s, term %d\n", cand.id, ch.Owner, ch.Fence)
		case ch.Kind == "unavailable":
			fmt.Fprintf(out, "%s: leader unknown: %s\n", cand.id, ch.Detail)
		default:
			fmt.Fprintf(out, "%s: no leader\n", cand.id)
		}
	}
}

// lockedWriter serialises writes of several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
