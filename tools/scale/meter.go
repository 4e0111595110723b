// Package scale measures what a fleet of sidelock sidecars costs its Redis
// masters and itself: the meters shared by the cost-model benchmark
// (tools/bench/model_test.go, the model's inputs) and the fleet simulation
// (BenchmarkScaleSim in this package, the model's check), so both read CPU,
// memory and connections the same way. tools/scale-model turns their output
// into docs/scale.md's table and plot.
package scale

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Master meters one redis-server process: its CPU from /proc (not INFO, so
// reading it costs the master nothing) and its memory and clients from
// INFO and CLIENT LIST over one connection of its own.
type Master struct {
	pid    int
	client *redis.Client
	selfID int64 // the meter's own connection, left out of client counts
}

// NewMaster opens the meter's connection to the master at addr run by pid.
func NewMaster(ctx context.Context, addr string, pid int) (*Master, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxActiveConns: 1, Protocol: 2, DisableIdentity: true})
	id, err := c.ClientID(ctx).Result()
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("meter %s: %w", addr, err)
	}
	return &Master{pid: pid, client: c, selfID: id}, nil
}

// Close closes the meter's connection.
func (m *Master) Close() error { return m.client.Close() }

// CPU is the time the master's threads have run, to the nanosecond. The
// scheduler's own account (/proc/<pid>/task/*/schedstat) is used because
// utime+stime in /proc/<pid>/stat count in 10 ms ticks, too coarse for
// single microsecond-scale operations; stat is the fallback.
func (m *Master) CPU() (time.Duration, error) { return ProcessTreeCPU(m.pid) }

// Wakeups is how many times the master's main thread went to sleep and
// had to be woken (voluntary context switches: each is an epoll_wait that
// found nothing to do). Together with RoundTrips it tells how many requests
// one wake-up served, which is what makes a command cheap or dear on a
// lightly loaded master.
func (m *Master) Wakeups() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no voluntary_ctxt_switches", m.pid)
}

// RoundTrips is how many requests clients made of the master, from INFO
// commandstats: every command but those sidelock's scripts run inside
// Redis (which the server counts too), with a health round's four
// pipelined commands (two INFOs, two CONFIG GETs, which nothing else sends
// but the meter's own INFOs) counted once.
func (m *Master) RoundTrips(ctx context.Context) (int64, error) {
	calls, err := m.commandCalls(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	for name, n := range calls {
		if scriptCommands[name] {
			continue
		}
		if name == "config|get" {
			n /= 2 // two per health round
		}
		total += n
	}
	return total, nil
}

// Commands is how many commands the master ran for clients, those the
// scripts run inside Redis included, the meter's own INFOs left out.
func (m *Master) Commands(ctx context.Context) (int64, error) {
	calls, err := m.commandCalls(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, n := range calls {
		total += n
	}
	return total, nil
}

// commandCalls is INFO commandstats' calls by command, INFO left out.
func (m *Master) commandCalls(ctx context.Context) (map[string]int64, error) {
	fields, err := m.Info(ctx, "commandstats")
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(fields))
	for k, v := range fields {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("INFO commandstats %s=%q: %w", k, v, err)
		}
		out[name] = n
	}
	return out, nil
}

// scriptCommands are the commands sidelock's Lua scripts call
// (pkg/redlock/redisnode/*.lua: the lock scripts and the member-list
// script); no client sends them itself. TestScriptCommandsAreThoseTheScriptsCall
// keeps the list in step with the scripts.
var scriptCommands = map[string]bool{
	"set": true, "get": true, "pexpire": true, "pttl": true, "del": true, "publish": true, "time": true,
	"zremrangebyscore": true, "zadd": true, "zrange": true, "pexpireat": true, "exists": true,
	"hset": true, "hgetall": true, "hdel": true,
}

// ProcessTreeCPU is the CPU time of every thread of process pid.
func ProcessTreeCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return statCPU(pid)
	}
	var total time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that just exited
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t, err)
		}
		total += time.Duration(ns)
	}
	if total == 0 { // schedstat present but not kept by this kernel
		return statCPU(pid)
	}
	return total, nil
}

// statCPU reads utime+stime (fields 14 and 15) of /proc/<pid>/stat.
func statCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields count from after it.
	rest := data[bytes.LastIndexByte(data, ')')+2:]
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}

// Info returns the fields of one INFO section.
func (m *Master) Info(ctx context.Context, section string) (map[string]string, error) {
	text, err := m.client.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return infoFields(text), nil
}

func infoFields(text string) map[string]string {
	fields := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && !strings.HasPrefix(k, "#") {
			fields[k] = v
		}
	}
	return fields
}

// InfoInt is one integer field of an INFO section.
func (m *Master) InfoInt(ctx context.Context, section, field string) (int64, error) {
	fields, err := m.Info(ctx, section)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(fields[field], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO %s %s=%q: %w", section, field, fields[field], err)
	}
	return v, nil
}

// UsedMemory is INFO memory's used_memory: what maxmemory counts.
func (m *Master) UsedMemory(ctx context.Context) (int64, error) {
	return m.InfoInt(ctx, "memory", "used_memory")
}

// OutputBytes is INFO stats' total_net_output_bytes: what the master has
// sent, up to but not including the reply that carries the count.
func (m *Master) OutputBytes(ctx context.Context) (int64, error) {
	n, _, err := m.output(ctx)
	return n, err
}

// OutputMark is OutputBytes with that reading's own reply added: the count
// once the reply has gone out. What the master sent others in a window is
// OutputBytes at its end less OutputMark at its start, provided the meter
// sends it nothing else in between: read the mark last at the start and
// OutputBytes first at the end.
func (m *Master) OutputMark(ctx context.Context) (int64, error) {
	n, reply, err := m.output(ctx)
	return n + reply, err
}

// output is total_net_output_bytes and the length of the reply carrying
// it: a RESP2 bulk string ($<len>\r\n<text>\r\n; the meter speaks RESP2).
func (m *Master) output(ctx context.Context) (count, reply int64, err error) {
	text, err := m.client.Info(ctx, "stats").Result()
	if err != nil {
		return 0, 0, err
	}
	v := infoFields(text)["total_net_output_bytes"]
	count, err = strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("INFO stats total_net_output_bytes=%q: %w", v, err)
	}
	return count, int64(len(text) + len(strconv.Itoa(len(text))) + 5), nil
}

// CommandCalls is how many times the master ran a command (INFO
// commandstats, e.g. "ping"), whoever sent it.
func (m *Master) CommandCalls(ctx context.Context, command string) (int64, error) {
	fields, err := m.Info(ctx, "commandstats")
	if err != nil {
		return 0, err
	}
	stats := fields["cmdstat_"+command] // calls=5,usec=3,...
	if stats == "" {
		return 0, nil // never run
	}
	calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
	return strconv.ParseInt(calls, 10, 64)
}

// Clients is what CLIENT LIST shows, the meter's own connection left out.
type Clients struct {
	Total  int
	PubSub int            // subscribed now (flag P)
	ByCmd  map[string]int // by the last command each ran: what it is used for
	// ByName counts the connections and sums their memory (tot-mem:
	// client structure, query and reply buffers) by CLIENT SETNAME.
	ByName map[string]NamedClients
}

// NamedClients is the connections of one client name.
type NamedClients struct {
	Count  int
	Memory int64
}

// Clients lists the master's client connections.
func (m *Master) Clients(ctx context.Context) (Clients, error) {
	text, err := m.client.ClientList(ctx).Result()
	if err != nil {
		return Clients{}, err
	}
	return parseClientList(text, m.selfID), nil
}

func parseClientList(text string, selfID int64) Clients {
	c := Clients{ByCmd: map[string]int{}, ByName: map[string]NamedClients{}}
	for line := range strings.Lines(text) {
		fields := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			fields[k] = v
		}
		if fields["id"] == "" || fields["id"] == strconv.FormatInt(selfID, 10) {
			continue
		}
		c.Total++
		if strings.Contains(fields["flags"], "P") {
			c.PubSub++
		}
		c.ByCmd[fields["cmd"]]++
		mem, _ := strconv.ParseInt(fields["tot-mem"], 10, 64)
		named := c.ByName[fields["name"]]
		named.Count++
		named.Memory += mem
		c.ByName[fields["name"]] = named
	}
	return c
}

// ProcessCPU is this process's user+system CPU time (getrusage, which the
// kernel keeps to the nanosecond of scheduled time).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessRSS is this process's resident memory in bytes (VmRSS).
func ProcessRSS() (int64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status")
}

// LiveHeap is the Go heap in use after a full collection: what the
// process's objects take, without garbage waiting to be collected.
func LiveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// SettledRSS is the resident memory after a collection that also returns
// freed pages to the kernel, so that a before/after difference shows what
// the objects created in between keep, not what earlier work left behind.
func SettledRSS() (int64, error) {
	debug.FreeOSMemory()
	return ProcessRSS()
}
