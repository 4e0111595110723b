//go:build linux

package chaos

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// proxy is a TCP relay between one sidecar and one master, on loopback,
// that injects network faults on that path only. It is deliberately small:
// the faults are coarse (whole reads are delayed or discarded), which is
// what a Redis client sees of a slow, lossy or cut network.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	fault  netFault
	links  map[*link]struct{}
	closed bool

	// running counts every goroutine of the proxy (accept loop, links,
	// pumps): close waits for them, so none outlives the test.
	running sync.WaitGroup
}

// netFault is the state of one path.
type netFault struct {
	latency time.Duration // added to every read, each way
	// lossRate is the share of reads delayed by a retransmission timeout:
	// TCP does not lose bytes, it resends them late.
	lossRate float64
	// blackhole drops everything and answers nothing, keeping connections
	// open: a partition as the client sees it (timeouts, no resets).
	blackhole bool
	// reset closes every connection and refuses new ones at once.
	reset bool
}

func (f netFault) String() string {
	switch {
	case f.reset:
		return "reset (partition with RST)"
	case f.blackhole:
		return "blackhole (silent partition)"
	case f.lossRate > 0:
		return fmt.Sprintf("loss %.0f%% (reads %v late)", 100*f.lossRate, retransmitDelay)
	case f.latency > 0:
		return fmt.Sprintf("latency +%v", f.latency)
	}
	return "healthy"
}

// retransmitDelay is how late a "lost" read arrives (Linux's minimum RTO).
const retransmitDelay = 200 * time.Millisecond

// link is one relayed connection; tainted once it dropped bytes, so it is
// closed on heal rather than left with a desynchronised Redis protocol.
type link struct {
	client, server net.Conn
	tainted        bool
}

func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	p.running.Go(p.accept)
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// set changes the fault; a reset or blackhole also cuts what exists, and
// healing closes every connection that lost bytes.
func (p *proxy) set(f netFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f
	for l := range p.links {
		if f.reset || (l.tainted && !f.blackhole) {
			p.dropLocked(l)
		}
	}
}

func (p *proxy) heal() { p.set(netFault{}) }

func (p *proxy) current() netFault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// close stops accepting, cuts every link and waits until every goroutine
// of the proxy has ended (each ends once its connections are closed; a
// dial to the master in progress ends within its timeout).
func (p *proxy) close() {
	_ = p.ln.Close() // first: no link is added after the sweep below
	p.mu.Lock()
	p.closed = true
	for l := range p.links {
		p.dropLocked(l)
	}
	p.mu.Unlock()
	p.running.Wait()
}

func (p *proxy) dropLocked(l *link) {
	_ = l.client.Close()
	_ = l.server.Close()
	delete(p.links, l)
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.running.Go(func() { p.serve(c) })
	}
}

func (p *proxy) serve(c net.Conn) {
	if f := p.current(); f.reset {
		_ = c.Close()
		return
	}
	s, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		_ = c.Close() // the master is down: the client sees a reset
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	var pumps sync.WaitGroup
	pumps.Go(func() { p.pump(l, s, c); done <- struct{}{} })
	pumps.Go(func() { p.pump(l, c, s); done <- struct{}{} })
	<-done
	p.mu.Lock()
	p.dropLocked(l)
	p.mu.Unlock()
	pumps.Wait() // the other direction ends now that both ends are closed
}

// pump copies src to dst, applying the path's fault to each read. Reads
// are stamped on arrival and written once their delay has passed, by a
// second goroutine, so latency delays the data without throttling it.
func (p *proxy) pump(l *link, dst, src net.Conn) {
	type chunk struct {
		data []byte
		due  time.Time
	}
	queue := make(chan chunk, 256)
	var reader sync.WaitGroup
	defer reader.Wait()
	reader.Go(func() {
		defer close(queue)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if delay, keep := p.delayFor(l); keep {
					queue <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
				}
			}
			if err != nil {
				return
			}
		}
	})
	for c := range queue {
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	for range queue { // let the reader finish
	}
}

// delayFor is how late a read is delivered, or false to drop it.
func (p *proxy) delayFor(l *link) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.fault
	if f.blackhole {
		l.tainted = true
		return 0, false
	}
	delay := f.latency
	if f.lossRate > 0 && rand.Float64() < f.lossRate {
		delay += retransmitDelay
	}
	return delay, true
}
