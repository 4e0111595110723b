package redisnode_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// The tenure scripts' calls that fall due at once are merged too (their
// many forms), and each acknowledged one was carried out: a take holds
// its key with the block's top committed and its holder record written, a
// note is in the record, a release deleted the key and the record.
func TestMergedTenureCallsEachReachTheMaster(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	raw := rawClient(t, srv)
	ctx := t.Context()
	const callers = 200
	top := time.Now().Add(time.Hour).UnixMicro()
	before := scriptRuns(t, raw)
	errs := make(chan error, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			errs <- takeNoteRelease(ctx, n, raw, fmt.Sprintf("tmerge/%d", i), top)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if runs := scriptRuns(t, raw) - before; runs >= 3*callers {
		t.Fatalf("%d script runs for %d calls: none was merged", runs, 3*callers)
	} else {
		t.Logf("%d script runs for %d calls", runs, 3*callers)
	}
}

func takeNoteRelease(ctx context.Context, n *redisnode.Node, raw *redis.Client, key string, top int64) error {
	keys := redlock.TenureKeysOf(key)
	a := redlock.TakeArgs{Value: "v-" + key, TTL: time.Minute, Fencing: redlock.FenceProposed, Proposal: top, Block: 4,
		Retention: time.Hour, Holder: redlock.HolderRecord{Grant: "g", Owner: "o", Channel: "c"}, Mark: redlock.WaiterMark{Sidecar: "s", Arrival: 1}}
	got, err := n.TakeTenure(ctx, keys, a)
	if err != nil || !got.Acquired || !got.Committed || got.Fence != top {
		return fmt.Errorf("%s: TakeTenure %+v, want taken with %d committed: %w", key, got, top, err)
	}
	if c, _ := raw.Get(ctx, keys.Fence).Result(); c != strconv.FormatInt(top, 10) {
		return fmt.Errorf("%s: counter %q after an acknowledged take, want %d", key, c, top)
	}
	if r, _ := n.GetHolder(ctx, keys); r.Record.Fence != top-3 {
		return fmt.Errorf("%s: holder record %+v after an acknowledged take, want fence %d", key, r.Record, top-3)
	}
	note := redlock.HolderRecord{Value: a.Value, Fence: top - 2, Grant: "g2", Owner: "o2", Channel: "c", Seq: 1}
	if ans, err := n.NoteHolder(ctx, keys, note, "s", time.Hour); err != nil || !ans.Written {
		return fmt.Errorf("%s: NoteHolder %+v: %w", key, ans, err)
	}
	if r, _ := n.GetHolder(ctx, keys); r.Record.Owner != "o2" {
		return fmt.Errorf("%s: holder record %+v after an acknowledged note, want owner o2", key, r.Record)
	}
	if ok, err := n.ReleaseTenure(ctx, keys, a.Value, redlock.WaiterMark{Sidecar: "s"}, ""); err != nil || !ok {
		return fmt.Errorf("%s: ReleaseTenure %v: %w", key, ok, err)
	}
	if n, err := raw.Exists(ctx, key, keys.Holder).Result(); err != nil || n != 0 {
		return fmt.Errorf("%s: %d of the key and its record still there after an acknowledged release: %w", key, n, err)
	}
	return nil
}
