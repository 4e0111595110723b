package redisnode

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
)

var (
	//go:embed marks.lua
	marksSrc string
	//go:embed take_tenure.lua
	takeTenureSrc string
	//go:embed commit_tenure.lua
	commitTenureSrc string
	//go:embed note_holder.lua
	noteHolderSrc string
	//go:embed release_tenure.lua
	releaseTenureSrc string
	//go:embed get_holder.lua
	getHolderSrc string

	takeTenureScript    = redis.NewScript(marksSrc + fenceFloorSrc + takeTenureSrc)
	commitTenureScript  = redis.NewScript(marksSrc + raiseCounterSrc + commitTenureSrc)
	noteHolderScript    = redis.NewScript(marksSrc + noteHolderSrc)
	releaseTenureScript = redis.NewScript(marksSrc + releaseTenureSrc)
	getHolderScript     = redis.NewScript(marksSrc + getHolderSrc)
	removeMarkScript    = redis.NewScript(`return redis.call('HDEL', KEYS[1], ARGV[1])`)
)

var _ redlock.TenureNode = (*Node)(nil)

func tenureKeys(k redlock.TenureKeys) []string { return []string{k.Key, k.Fence, k.Holder, k.Marks} }

// TakeTenure implements redlock.TenureNode.
func (n *Node) TakeTenure(ctx context.Context, keys redlock.TenureKeys, a redlock.TakeArgs) (redlock.TakeAnswer, error) {
	reply, err := n.pipe.run(ctx, takeTenureScript, tenureKeys(keys),
		a.Value, milliseconds(a.TTL), a.From, a.Fencing, a.Proposal, a.Block, milliseconds(a.Retention),
		a.Holder.Grant, a.Holder.Owner, a.Holder.Channel, a.Mark.Sidecar, a.Mark.Arrival, markMilliseconds(a.Mark.TTL)).Slice()
	if err != nil {
		return redlock.TakeAnswer{}, n.wrap(ctx, "take", err)
	}
	ints, sidecar, ok := intsThenString(reply, 11)
	if !ok {
		return redlock.TakeAnswer{}, n.wrap(ctx, "take", fmt.Errorf("unexpected script reply %v", reply))
	}
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	return redlock.TakeAnswer{
		Acquired: ints[0] == 1, HolderTTL: ms(ints[1]), Fence: ints[2], Committed: ints[3] == 1, Prev: ints[4],
		Idle: ints[5] == 1, IdleTTL: ms(ints[6]), ByMark: ints[7] == 1,
		Oldest: oldestOf(ints[8], ints[9], sidecar),
	}, nil
}

// markMilliseconds is milliseconds for a mark's ttl, where 0 means none.
func markMilliseconds(ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	return milliseconds(ttl)
}

func oldestOf(arrival, leftMS int64, sidecar string) redlock.WaiterMark {
	if arrival == 0 {
		return redlock.WaiterMark{}
	}
	return redlock.WaiterMark{Sidecar: sidecar, Arrival: arrival, TTL: time.Duration(leftMS) * time.Millisecond}
}

// intsThenString reads a script reply of n-1 integers and a string.
func intsThenString(reply []any, n int) ([]int64, string, bool) {
	if len(reply) != n {
		return nil, "", false
	}
	ints := make([]int64, n-1)
	for i := range ints {
		v, ok := reply[i].(int64)
		if !ok {
			return nil, "", false
		}
		ints[i] = v
	}
	s, ok := reply[n-1].(string)
	return ints, s, ok
}

// CommitTenure implements redlock.TenureNode.
func (n *Node) CommitTenure(ctx context.Context, keys redlock.TenureKeys, value string, top int64, rec redlock.HolderRecord, retention time.Duration) (bool, error) {
	ok, err := n.pipe.run(ctx, commitTenureScript, []string{keys.Key, keys.Fence, keys.Holder},
		value, top, milliseconds(retention), rec.Fence, rec.Grant, rec.Owner, rec.Channel).Int64()
	if err != nil {
		return false, n.wrap(ctx, "commit fence", err)
	}
	return ok == 1, nil
}

// NoteHolder implements redlock.TenureNode.
func (n *Node) NoteHolder(ctx context.Context, keys redlock.TenureKeys, rec redlock.HolderRecord, self string, retention time.Duration) (redlock.NoteAnswer, error) {
	var idle int64
	if rec.Idle {
		idle = markMilliseconds(rec.IdleTTL)
	}
	reply, err := n.pipe.run(ctx, noteHolderScript, []string{keys.Key, keys.Holder, keys.Marks},
		rec.Value, rec.Fence, rec.Grant, rec.Owner, idle, rec.Channel, rec.Seq, milliseconds(retention), self).Slice()
	if err != nil {
		return redlock.NoteAnswer{}, n.wrap(ctx, "note holder", err)
	}
	ints, sidecar, ok := intsThenString(reply, 4)
	if !ok {
		return redlock.NoteAnswer{}, n.wrap(ctx, "note holder", fmt.Errorf("unexpected script reply %v", reply))
	}
	return redlock.NoteAnswer{Written: ints[0] == 1, Oldest: oldestOf(ints[1], ints[2], sidecar)}, nil
}

// ReleaseTenure implements redlock.TenureNode.
func (n *Node) ReleaseTenure(ctx context.Context, keys redlock.TenureKeys, value string, mark redlock.WaiterMark, notify string) (bool, error) {
	deleted, err := n.pipe.run(ctx, releaseTenureScript, []string{keys.Key, keys.Holder, keys.Marks},
		value, mark.Sidecar, mark.Arrival, markMilliseconds(mark.TTL), notify).Int64()
	if err != nil {
		return false, n.wrap(ctx, "release", err)
	}
	return deleted == 1, nil
}

// RemoveMark implements redlock.TenureNode.
func (n *Node) RemoveMark(ctx context.Context, keys redlock.TenureKeys, sidecar string) error {
	if err := n.pipe.run(ctx, removeMarkScript, []string{keys.Marks}, sidecar).Err(); err != nil {
		return n.wrap(ctx, "remove mark", err)
	}
	return nil
}

// GetHolder implements redlock.TenureNode.
func (n *Node) GetHolder(ctx context.Context, keys redlock.TenureKeys) (redlock.HolderRead, error) {
	reply, err := n.pipe.run(ctx, getHolderScript, []string{keys.Key, keys.Fence, keys.Holder}).Slice()
	if err != nil {
		return redlock.HolderRead{}, n.wrap(ctx, "get", err)
	}
	r, err := holderRead(reply)
	if err != nil {
		return redlock.HolderRead{}, n.wrap(ctx, "get", err)
	}
	return r, nil
}

// holderRead reads a get_holder.lua reply.
func holderRead(reply []any) (redlock.HolderRead, error) {
	bad := fmt.Errorf("unexpected script reply %v", reply)
	if len(reply) != 11 {
		return redlock.HolderRead{}, bad
	}
	str := func(i int) string { s, _ := reply[i].(string); return s }
	num := func(i int) (int64, error) { return strconv.ParseInt(str(i), 10, 64) }
	pttl, ok1 := reply[1].(int64)
	left, ok2 := reply[8].(int64)
	counter, err1 := num(2)
	fence, err2 := num(4)
	seq, err3 := num(10)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil {
		return redlock.HolderRead{}, bad
	}
	r := redlock.HolderRead{Value: str(0), TTL: time.Duration(pttl) * time.Millisecond, Counter: counter}
	if v := str(3); v != "" {
		r.Record = redlock.HolderRecord{Value: v, Fence: fence, Grant: str(5), Owner: str(6), Idle: str(7) == "idle",
			IdleTTL: time.Duration(left) * time.Millisecond, Channel: str(9), Seq: seq}
	}
	return r, nil
}

// WatchMessages implements redlock.MessageWatcher over the release
// subscription's connection (watch.go).
func (n *Node) WatchMessages(channel string, notify func(payload string)) (cancel func()) {
	return n.watchChannel(channel, &watcher{message: notify})
}
