package redisnode_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// infoBudget bounds one ServerInfo call in these tests: a few round trips
// on loopback, with slack for -race on a busy machine.
const infoBudget = time.Second

func serverInfo(t *testing.T, n *redisnode.Node) redlock.ServerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), infoBudget)
	defer cancel()
	info, err := n.ServerInfo(ctx)
	if err != nil {
		t.Fatalf("ServerInfo: %v", err)
	}
	return info
}

func TestServerInfoOfAPlainMaster(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	info := serverInfo(t, newNode(t, redisnode.Options{Addr: srv.Addr()}))
	if len(info.RunID) != 40 || info.Role != "master" || !info.PersistenceKnown || info.AppendOnly || info.AppendFsync != "everysec" {
		t.Fatalf("info %+v, want a 40-char run id, role master, appendonly no, appendfsync everysec", info)
	}
	if info.Durable() {
		t.Fatal("a master without an append-only file reported durable")
	}
}

func TestServerInfoOfADurableMaster(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithAppendOnly())
	if info := serverInfo(t, newNode(t, redisnode.Options{Addr: srv.Addr()})); !info.Durable() {
		t.Fatalf("appendonly yes, appendfsync always reported not durable: %+v", info)
	}
}

func TestServerInfoOfAReplica(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	host, port, _ := net.SplitHostPort(master.Addr())
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", host, port))
	info := serverInfo(t, newNode(t, redisnode.Options{Addr: replica.Addr()}))
	if info.Role != "slave" {
		t.Fatalf("replica reports role %q", info.Role)
	}
	if m := serverInfo(t, newNode(t, redisnode.Options{Addr: master.Addr()})); m.RunID == info.RunID {
		t.Fatal("replica and master share a run id")
	}
}

// CONFIG renamed away, or denied by an ACL, leaves persistence unknown
// without failing the call: INFO alone still identifies the server.
func TestServerInfoWithoutConfig(t *testing.T) {
	t.Parallel()
	renamed := redistest.Start(t, redistest.WithArgs("--rename-command", "CONFIG", ""))
	denied := redistest.Start(t, redistest.WithArgs("--user", "locks", "on", ">secret", "~*", "&*", "+@all", "-config"))
	for _, n := range []*redisnode.Node{
		newNode(t, redisnode.Options{Addr: renamed.Addr()}),
		newNode(t, redisnode.Options{Addr: denied.Addr(), Username: "locks", Password: "secret"}),
	} {
		info := serverInfo(t, n)
		if info.PersistenceKnown || info.Durable() || info.RunID == "" || info.Role != "master" {
			t.Fatalf("%s: info %+v, want persistence unknown and identity read", n.Addr(), info)
		}
	}
}

// After a restart the run id changes and the uptime starts again; the
// reported uptime never exceeds the time the process has really run.
func TestServerInfoAfterRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	var before redlock.ServerInfo
	deadline := time.Now().Add(5 * time.Second)
	for before = serverInfo(t, n); before.Uptime == 0; before = serverInfo(t, n) {
		if time.Now().After(deadline) {
			t.Fatal("uptime still 0 after 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	restartBegan := time.Now()
	srv.Restart(t)
	after := serverInfo(t, n)
	if after.RunID == before.RunID || after.Uptime >= before.Uptime {
		t.Fatalf("after restart %+v, before %+v: want a new run id and a lower uptime", after, before)
	}
	if ran := time.Since(restartBegan); after.Uptime > ran {
		t.Fatalf("uptime %v exceeds the %v since the restart began", after.Uptime, ran)
	}
}

// A master that is down or frozen fails within the caller's deadline.
func TestServerInfoIsBoundedByTheContext(t *testing.T) {
	t.Parallel()
	frozen, dead := redistest.Start(t), redistest.Start(t)
	frozenNode := newNode(t, redisnode.Options{Addr: frozen.Addr()})
	deadNode := newNode(t, redisnode.Options{Addr: dead.Addr()})
	serverInfo(t, frozenNode) // a pooled connection, so the freeze hits a read
	frozen.Stop()
	t.Cleanup(frozen.Cont)
	dead.Kill()
	for _, n := range []*redisnode.Node{frozenNode, deadNode} {
		ctx, cancel := context.WithTimeout(t.Context(), nodeBudget)
		start := time.Now()
		_, err := n.ServerInfo(ctx)
		cancel()
		if took := time.Since(start); err == nil || took > 10*nodeBudget {
			t.Fatalf("%s: ServerInfo = %v after %v, want an error within the %v budget", n.Addr(), err, took, nodeBudget)
		}
	}
}

// A connection dropped and dialled again reaches the same server: the node
// knows it (redlock.ServerTracker), so a verdict on that server's run id
// holds over it. After a restart, or from a server that refuses INFO, it
// does not.
func TestReconnectionsKnowTheServerTheyReached(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	runID := serverInfo(t, n).RunID
	judged := n.ConnectionsOpened()
	kill := rawClient(t, srv)
	if err := kill.ClientKillByFilter(t.Context(), "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	serverInfo(t, n) // dials again
	if n.ConnectionsOpened() == judged {
		t.Fatal("no new connection after CLIENT KILL")
	}
	if !n.ReachedSince(judged, runID) || n.ReachedSince(judged, "another") || n.ReachedSince(judged, "") {
		t.Fatalf("after a reconnect to %s: reached it %v", runID, n.ReachedSince(judged, runID))
	}
	srv.Restart(t)
	serverInfo(t, n)
	if n.ReachedSince(judged, runID) {
		t.Fatal("connections to the restarted server reported as reaching the old one")
	}

	denied := redistest.Start(t, redistest.WithArgs("--user", "locks", "on", ">secret", "~*", "&*", "+@all", "-info"))
	d := newNode(t, redisnode.Options{Addr: denied.Addr(), Username: "locks", Password: "secret"})
	ctx, cancel := context.WithTimeout(t.Context(), infoBudget)
	defer cancel()
	if err := d.Ping(ctx); err != nil {
		t.Fatalf("a master that refuses INFO: %v", err)
	}
	if d.ConnectionsOpened() == 0 || d.ReachedSince(0, "") {
		t.Fatal("a connection of an unknown server reported as known")
	}
}
