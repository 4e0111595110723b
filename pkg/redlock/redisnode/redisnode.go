// Package redisnode implements redlock.Node on one independent Redis master.
//
// Each operation is a single Lua script, so its check-then-act steps are
// atomic on the server and cost one round trip. Scripts run through EVALSHA
// and fall back to EVAL after NOSCRIPT (a restarted or SCRIPT FLUSHed
// master), so no separate loading step is needed.
//
// The client is tuned for the Redlock budget: the algorithm gives every call
// a short deadline (tens of milliseconds), and the deadline must bound the
// whole call — pool wait, dial, write and read — with no hidden retries.
//
// A Release that deletes a key also PUBLISHes "released" on the channel
// named after the key itself, and Node.WatchReleases listens for it over one
// Pub/Sub connection per Node, subscribed only to the keys being watched.
// Any client may subscribe to a lock key's channel to learn of its releases.
//
// A Node keeps to a fixed connection budget whatever the number of callers:
// Options.MaxConns command connections (2 by default) plus that one Pub/Sub
// connection. The connections carry Options.ClientName in CLIENT LIST, and
// Node.Stats reports them along with the pipelining figures.
package redisnode

import (
	"cmp"
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sidelock/sidelock/pkg/redlock"
)

var (
	_ redlock.Node               = (*Node)(nil)
	_ redlock.ConnectionCounter  = (*Node)(nil)
	_ redlock.ConnectionNotifier = (*Node)(nil)
)

var (
	//go:embed take_key.lua
	takeKeySrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed get.lua
	getSrc string

	acquireScript = redis.NewScript(takeKeySrc + acquireSrc)
	extendScript  = redis.NewScript(extendSrc)
	releaseScript = redis.NewScript(releaseSrc)
	getScript     = redis.NewScript(getSrc)
)

// fallbackTimeout bounds dials, reads and writes when the caller's context
// has no earlier deadline (a context deadline always wins). A lock call
// slower than this is useless anyway: the lease's validity is draining.
const fallbackTimeout = time.Second

// Options configures the connection to one Redis master.
type Options struct {
	// Addr is the master's "host:port".
	Addr string
	// Username selects a Redis 6+ ACL user; empty means "default".
	Username string
	// Password authenticates with AUTH (requirepass or ACL).
	Password string
	// TLS enables TLS when non-nil. An empty ServerName is taken from Addr.
	TLS *tls.Config

	// ClientName names the command connections in the master's CLIENT
	// LIST (default DefaultClientName), and the release subscription
	// ClientName+SubscriptionSuffix, so that an operator can tell them
	// apart and count them. It is set once per connection, when it is
	// dialled; calls do not pay for it. A server that refuses CLIENT
	// SETNAME (an ACL user without it) leaves the connections unnamed.
	ClientName string
	// MaxConns is the budget of command connections to the master
	// (default and minimum DefaultMaxConns, 2): one for lone lock calls,
	// pings, server-info reads and script loads, and MaxConns-1 for the
	// pipelines of coalesced lock calls, of which as many may be in flight
	// at once. Lock calls of every caller of the pod share them, so the
	// budget holds whatever the number of callers; calls that find every
	// pipeline busy queue (Stats.QueuedCalls). The release subscription
	// (WatchReleases) is one connection more, open once a watch starts.
	MaxConns int
	// OnQueueWait, when set, is called once per lock call with the time
	// it waited from being queued to its batch being sent, after the
	// caller has its reply. It runs on the goroutine that sent the batch,
	// so it must be cheap and must not block (a histogram's Observe).
	// SetOnQueueWait replaces it.
	OnQueueWait func(time.Duration)
	// SubscriptionIdle is how long the release subscription's connection
	// stays open once no key is watched (default 30s): a pod that waited
	// once does not keep a third connection to every master for ever,
	// and a pod that waits often does not redial for every wait.
	SubscriptionIdle time.Duration
}

const (
	// DefaultClientName is the connection name when Options.ClientName is
	// empty.
	DefaultClientName = "sidelock"
	// SubscriptionSuffix is appended to the client name for the release
	// subscription's connection.
	SubscriptionSuffix = "-sub"
	// DefaultMaxConns is the default, and the smallest, command-connection
	// budget: one regular connection and one pipeline.
	DefaultMaxConns = 2
	// DefaultSubscriptionIdle is Options.SubscriptionIdle's default.
	DefaultSubscriptionIdle = 30 * time.Second
)

// Node is a redlock.Node backed by one Redis master. It is safe for
// concurrent use.
type Node struct {
	addr   string
	client *redis.Client // the command connections
	// subscriber serves the release subscription only. go-redis gives every
	// connection of a client the same name; a client of its own gives the
	// subscription its own name, so CLIENT LIST tells it from the command
	// connections even while it is subscribed to nothing (it then looks
	// like any idle connection). It holds no connection until a watch.
	subscriber *redis.Client
	pipe       *pipeliner // every scripted call goes through it
	releases   releases   // see WatchReleases
	// conns counts the command connections dialled and the servers they
	// reached (redlock.ServerTracker); the subscription's do not count,
	// as the health checker never uses it.
	conns *connections
}

// New returns a Node for the master at opts.Addr. It does not connect: the
// first call dials, and a master that is down only fails the calls made
// while it is down.
func New(opts Options) *Node {
	if opts.ClientName == "" {
		opts.ClientName = DefaultClientName
	}
	opts.MaxConns = max(opts.MaxConns, DefaultMaxConns)
	pipelines := opts.MaxConns - 1 // the other one is the regular pool's

	conns := &connections{}
	commandOpts := clientOptions(opts, opts.ClientName, pipelines)
	commandOpts.OnConnect = conns.onConnect(opts.ClientName)
	client := redis.NewClient(commandOpts)
	n := &Node{
		addr:       opts.Addr,
		client:     client,
		subscriber: redis.NewClient(clientOptions(opts, opts.ClientName+SubscriptionSuffix, pipelines)),
		pipe:       newPipeliner(client, pipelines),
		conns:      conns,
	}
	n.pipe.setOnQueueWait(opts.OnQueueWait)
	n.releases.idle = cmp.Or(opts.SubscriptionIdle, DefaultSubscriptionIdle)
	return n
}

// SetOnQueueWait replaces Options.OnQueueWait (nil turns it off), for an
// observer made after the Node; it applies from the next batch sent.
func (n *Node) SetOnQueueWait(f func(time.Duration)) { n.pipe.setOnQueueWait(f) }

// clientOptions are the go-redis settings of one master's connections,
// named name, with a pipeline pool for the given number of pipelines.
func clientOptions(opts Options, name string, pipelines int) *redis.Options {
	return &redis.Options{
		Addr:      opts.Addr,
		Username:  opts.Username,
		Password:  opts.Password,
		TLSConfig: opts.TLS,
		OnConnect: nameConnection(name),

		// Honour the per-call context deadline on every socket read and
		// write. Without it go-redis waits for ReadTimeout instead. Dials
		// run on a background goroutine bounded by DialTimeout; the caller
		// stops waiting when its context ends, and a dial that completes
		// late still warms the pool for the next call.
		ContextTimeoutEnabled: true,
		DialTimeout:           fallbackTimeout,
		ReadTimeout:           fallbackTimeout,
		WriteTimeout:          fallbackTimeout,

		// No retries: inside a ~50ms budget a retry cannot help a master
		// that just failed, it only delays the verdict, and the algorithm
		// already tolerates a minority of failed nodes. Stale pooled
		// connections (after a master restart) are not a reason to retry:
		// go-redis health-checks idle connections before reuse. Note that
		// after PoolSize failed dials go-redis fails calls fast with the
		// last dial error until a background probe (every second)
		// reconnects, so a returning master may stay "down" for up to ~1s.
		MaxRetries:    -1,
		DialerRetries: 1,

		// Connection budget: go-redis keeps pipelines on a pool of their
		// own, sized to the pipeliner's slots; the regular pool (lone
		// calls, pings, server info, script loads) is capped hard at one.
		// A pipeline that finds the pipeline pool full (a ServerInfo
		// beside busy slots) spills to the regular pool and waits for its
		// one connection, so the client never holds more than MaxConns
		// command connections.
		PipelinePoolSize: pipelines,
		PoolSize:         1,
		MaxActiveConns:   1,

		// RESP2 is all the scripts need, and it works with every Redis
		// version and with proxies that do not speak RESP3. RESP3 would
		// only add push-notification handling to every connection.
		Protocol: 2,
		// CLIENT SETINFO and CLIENT MAINT_NOTIFICATIONS would each add a
		// round trip to every new connection, eating into the first call's
		// budget, for features sidelock does not use (and that servers
		// older than 7.2 reject anyway). The client name is worth its
		// round trip (nameConnection).
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// nameConnection names each new connection with CLIENT SETNAME: one round
// trip per dial, none per call (TestClientNameIsSetOncePerConnection).
// go-redis's own Options.ClientName costs the same (it names the
// connection in HELLO, then always once more with CLIENT SETNAME), but
// fails the connection when the server refuses the command: an ACL user
// without +client could then not lock at all. A refused name is only a
// loss of observability, so the connection is kept, unnamed; a failure to
// get any answer still fails the dial. Command connections also read
// which server they reached in the same round trip (connections.onConnect).
func nameConnection(name string) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if err := cn.ClientSetName(ctx, name).Err(); err != nil && !isRefusal(err) {
			return err
		}
		return nil
	}
}

// NotifyConnections implements redlock.ConnectionNotifier.
func (n *Node) NotifyConnections(f func()) { n.conns.notify.Store(&f) }

// ConnectionsOpened implements redlock.ConnectionCounter: the command
// connections dialled so far.
func (n *Node) ConnectionsOpened() uint64 { return n.conns.opened.Load() }

// ReachedSince implements redlock.ServerTracker.
func (n *Node) ReachedSince(since uint64, runID string) bool {
	return n.conns.reachedSince(since, runID)
}

var _ redlock.ServerTracker = (*Node)(nil)

// Addr returns the master's address as given in Options.
func (n *Node) Addr() string { return n.addr }

// Acquire implements redlock.Node.
func (n *Node) Acquire(ctx context.Context, key, value string, ttl time.Duration) (bool, time.Duration, error) {
	reply, err := n.pipe.run(ctx, acquireScript, []string{key}, value, milliseconds(ttl)).Int64Slice()
	if err != nil {
		return false, 0, n.wrap(ctx, "acquire", err)
	}
	if len(reply) != 2 {
		return false, 0, n.wrap(ctx, "acquire", fmt.Errorf("unexpected script reply %v", reply))
	}
	if reply[0] == 1 {
		return true, 0, nil
	}
	return false, time.Duration(reply[1]) * time.Millisecond, nil
}

// Extend implements redlock.Node.
func (n *Node) Extend(ctx context.Context, key, value string, ttl time.Duration) (redlock.ExtendOutcome, error) {
	reply, err := n.pipe.run(ctx, extendScript, []string{key}, value, milliseconds(ttl)).Int64()
	if err != nil {
		return redlock.ExtendHeldByOther, n.wrap(ctx, "extend", err)
	}
	outcome, err := extendOutcome(reply)
	if err != nil {
		return redlock.ExtendHeldByOther, n.wrap(ctx, "extend", err)
	}
	return outcome, nil
}

// extendOutcome checks a script's extend answer.
func extendOutcome(reply int64) (redlock.ExtendOutcome, error) {
	switch o := redlock.ExtendOutcome(reply); o {
	case redlock.ExtendHeldByOther, redlock.ExtendRenewed, redlock.ExtendMissing:
		return o, nil
	}
	return 0, fmt.Errorf("unexpected script reply %d", reply)
}

// Release implements redlock.Node.
func (n *Node) Release(ctx context.Context, key, value string) (bool, error) {
	released, err := n.pipe.run(ctx, releaseScript, []string{key}, value).Bool()
	if err != nil {
		return false, n.wrap(ctx, "release", err)
	}
	return released, nil
}

// Get implements redlock.Node.
func (n *Node) Get(ctx context.Context, key string) (string, time.Duration, error) {
	reply, err := n.pipe.run(ctx, getScript, []string{key}).Slice()
	if errors.Is(err, redis.Nil) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, n.wrap(ctx, "get", err)
	}
	value, pttl, ok := valueAndTTL(reply)
	if !ok {
		return "", 0, n.wrap(ctx, "get", fmt.Errorf("unexpected script reply %v", reply))
	}
	return value, time.Duration(pttl) * time.Millisecond, nil
}

func valueAndTTL(reply []any) (string, int64, bool) {
	if len(reply) != 2 {
		return "", 0, false
	}
	value, ok1 := reply[0].(string)
	pttl, ok2 := reply[1].(int64)
	return value, pttl, ok1 && ok2
}

// Ping implements redlock.Node.
func (n *Node) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return n.wrap(ctx, "ping", err)
	}
	if err := n.client.Ping(ctx).Err(); err != nil {
		return n.wrap(ctx, "ping", err)
	}
	return nil
}

// Close stops release watching (no notify runs once it returns), then
// closes the connection pool. Calls after Close fail.
func (n *Node) Close() error {
	// The PubSub goes first: it dials through the subscriber client, and
	// its goroutines must be gone before that client is.
	n.releases.close()
	n.pipe.close()
	if err := errors.Join(n.subscriber.Close(), n.client.Close()); err != nil {
		return fmt.Errorf("redis %s: close: %w", n.addr, err)
	}
	return nil
}

// wrap names the master and operation in err. When the call ran out of
// time, context.DeadlineExceeded (or the cancellation) is wrapped too, so
// callers can tell a timed-out node with errors.Is: go-redis reports a
// socket deadline as a bare "i/o timeout", and the socket deadline can fire
// a moment before the context's own timer marks it done.
func (n *Node) wrap(ctx context.Context, op string, err error) error {
	if ctxErr := contextError(ctx); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("redis %s: %s: %w: %w", n.addr, op, ctxErr, err)
	}
	return fmt.Errorf("redis %s: %s: %w", n.addr, op, err)
}

func contextError(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// milliseconds converts ttl to whole milliseconds for PX/PEXPIRE, rounding
// up so a lease never ends earlier than asked, and to at least 1ms because
// Redis rejects a zero or negative expiry.
func milliseconds(ttl time.Duration) int64 {
	ms := int64((ttl + time.Millisecond - 1) / time.Millisecond)
	return max(ms, 1)
}
