//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// holderEnv makes the test binary a client process that holds a lock over
// a connection (hold=true) and prints what it is promised (see
// runHolderProcess): a process to kill -9 mid-hold, whose death only the
// kernel reports to the sidecar.
const holderEnv = "SIDELOCK_CHAOS_HOLD_URL"

// runHolderProcess is the whole holder process. It prints
// "acquired <fence> <valid_until> <received>" (Unix nanoseconds, the
// receive time on the wall clock it shares with the test) when it holds
// the lock, then "promise <event> <valid_until>" for every later event
// that carries one (renewed, expiring, a lost at shutdown), so that every
// valid_until published to it reaches the oracle.
func runHolderProcess(url string) int {
	res, err := http.Post(url, "", nil)
	if err != nil {
		fmt.Println("failed", err)
		return 3
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		fmt.Println("failed", res.StatusCode)
		return 3
	}
	sc := bufio.NewScanner(res.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		received := time.Now().UnixNano()
		var lease struct {
			Fence      int64     `json:"fence"`
			ValidUntil time.Time `json:"valid_until"`
		}
		_ = json.Unmarshal([]byte(data), &lease)
		switch {
		case event == "acquired":
			fmt.Printf("acquired %d %d %d\n", lease.Fence, lease.ValidUntil.UnixNano(), received)
		case !lease.ValidUntil.IsZero() && !strings.ContainsAny(event, " \t"):
			fmt.Printf("promise %s %d\n", event, lease.ValidUntil.UnixNano())
		}
	}
	return 0
}

// holderProc is a running holder process. A goroutine reads what it
// prints, recording its grant and renewals in the oracle, until the
// process dies; kill waits for that goroutine.
type holderProc struct {
	cmd     *exec.Cmd
	o       *oracle
	holding chan struct{} // closed once the process holds the lock
	read    chan struct{} // closed when the reader has seen the end of the output

	mu      sync.Mutex
	promise *promise // the grant, once it holds the lock
}

// grant is the holder's grant, nil while it holds nothing.
func (h *holderProc) grant() *promise {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.promise
}

// startHolder runs a holder for name on car and waits (bounded) until it
// holds the lock; ok is false if it could not get it (the process is then
// dead and its reader ended).
func startHolder(ctx context.Context, car *sidecarProc, name, owner string, o *oracle) (*holderProc, bool) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holderEnv+"="+car.api+"/locks/"+name+"?hold=true&wait=2s&owner="+owner)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	o.attempted(owner, wallNow()) // before it can be granted, for the watches' judge
	if err != nil || cmd.Start() != nil {
		return nil, false
	}
	h := &holderProc{cmd: cmd, o: o, holding: make(chan struct{}), read: make(chan struct{})}
	go h.readOutput(out, car.idx, name, owner)
	select {
	case <-h.holding:
		return h, true
	case <-h.read: // it failed, or exited
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	h.kill()
	return nil, false
}

// readOutput records the holder's grant and renewals until its output ends.
func (h *holderProc) readOutput(out io.Reader, sidecar int, name, owner string) {
	defer close(h.read)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var fence, until, received int64
		if _, err := fmt.Sscanf(sc.Text(), "acquired %d %d %d", &fence, &until, &received); err == nil && h.grant() == nil {
			p := h.o.granted(lock(name), owner, "holder process", sidecar, fence, time.Unix(0, received), time.Unix(0, until))
			h.mu.Lock()
			h.promise = p
			h.mu.Unlock()
			close(h.holding)
			continue
		}
		var event string
		if _, err := fmt.Sscanf(sc.Text(), "promise %s %d", &event, &until); err == nil {
			if p := h.grant(); p != nil {
				h.o.promised(p, time.Unix(0, until), event)
			}
		}
	}
	_, _ = io.Copy(io.Discard, out) // a line too long for the scanner: let the process go on
}

// kill is kill -9: the kernel closes the connection, which releases the
// lock; nothing else happens. It returns the moment of the kill, once the
// process and the reader of its output have ended. The moment is read
// before the signal: the release the death causes, and a grant to another
// caller, can come before this goroutine runs again.
func (h *holderProc) kill() time.Time {
	at := time.Now()
	_ = h.cmd.Process.Kill()
	<-h.read // the pipe's end: every line it printed is recorded
	_ = h.cmd.Wait()
	if p := h.grant(); p != nil { // even one startHolder gave up on
		h.o.releasing(p, at) // its connection closed: the lock is given up
	}
	return at
}
