//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// holderEnv makes the test binary a client process that holds a lock over
// a connection (hold=true) and prints "acquired <fence>": a process to
// kill -9 mid-hold, whose death only the kernel reports to the sidecar.
const holderEnv = "SIDELOCK_CHAOS_HOLD_URL"

// runHolderProcess is the whole holder process.
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
		if data, ok := strings.CutPrefix(line, "data: "); ok && event == "acquired" {
			var lease struct {
				Fence      int64     `json:"fence"`
				ValidUntil time.Time `json:"valid_until"`
			}
			_ = json.Unmarshal([]byte(data), &lease)
			fmt.Printf("acquired %d %d\n", lease.Fence, lease.ValidUntil.UnixNano())
		}
	}
	return 0
}

// holderProc is a running holder process.
type holderProc struct {
	cmd   *exec.Cmd
	fence int64
	valid time.Time
}

// startHolder runs a holder for name on car and waits (bounded) until it
// holds the lock; ok is false if it could not get it.
func startHolder(ctx context.Context, car *sidecarProc, name, owner string) (*holderProc, bool) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holderEnv+"="+car.api+"/locks/"+name+"?hold=true&wait=2s&owner="+owner)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil || cmd.Start() != nil {
		return nil, false
	}
	h := &holderProc{cmd: cmd}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		var nanos int64
		if _, err := fmt.Sscanf(l, "acquired %d %d", &h.fence, &nanos); err == nil {
			h.valid = time.Unix(0, nanos)
			return h, true
		}
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	h.kill()
	return nil, false
}

// kill is kill -9: the kernel closes the connection, nothing else happens.
func (h *holderProc) kill() time.Time {
	_ = h.cmd.Process.Kill()
	at := time.Now()
	_ = h.cmd.Wait()
	return at
}
