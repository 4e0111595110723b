package redisnode

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Batched scripts. Each lock script that calls of several callers may
// need at once (a grant's take, its commit, its release, a failed grant's
// withdrawal) has a "many" form: the very script, wrapped as a function
// and run once per call inside one script call (many.lua). The pipeliner
// merges the calls of a batch that run the same script into one call of
// its many form (mergeBatch), so a master runs one script per batch, not
// one per key, and ReleaseMany and AcquireProposedMany send their items
// as one call. A script's error (never expected: wrong type, out of
// memory) then fails every call of its batch, as it would each alone.

//go:embed many.lua
var manySrc string

// manyForm is the many form of a script whose calls take keys keys and
// args arguments each.
type manyForm struct {
	script     *redis.Script
	keys, args int
}

// manyOf wraps body (a script's own text, after the helpers in preamble
// that it calls) as the function many.lua runs per call.
func manyOf(preamble, body string, keys, args int) manyForm {
	src := preamble + "local function one(KEYS, ARGV)\n" + body + "\nend\n" + manySrc
	return manyForm{script: redis.NewScript(src), keys: keys, args: args}
}

var (
	acquireProposedMany = manyOf(fenceFloorSrc+takeKeySrc, acquireProposedSrc, 2, 4)
	releaseMany         = manyOf("", releaseSrc, 1, 1)

	// manyForms are the scripts whose concurrent calls are merged.
	manyForms = map[*redis.Script]manyForm{
		acquireProposedScript:  acquireProposedMany,
		acquireCommittedScript: manyOf(fenceFloorSrc+takeKeySrc, acquireCommittedSrc, 2, 4),
		commitFenceScript:      manyOf(raiseCounterSrc, commitFenceSrc, 2, 3),
		// A tenure's (tenure.go).
		takeTenureScript:       manyOf(marksSrc+fenceFloorSrc, takeTenureSrc, 4, 13),
		commitTenureScript:     manyOf(marksSrc+raiseCounterSrc, commitTenureSrc, 3, 7),
		noteHolderScript:       manyOf(marksSrc, noteHolderSrc, 3, 9),
		releaseTenureScript:    manyOf(marksSrc, releaseTenureSrc, 3, 5),
		withdrawProposalScript: manyOf("", withdrawProposalSrc, 2, 4),
		releaseScript:          releaseMany,
	}
)

// fits reports whether a call with these keys and args is one of f's.
func (f manyForm) fits(keys []string, args []any) bool {
	return len(keys) == f.keys && len(args) == f.args
}

// flatten lays out calls (keys and args of each, which fit f) as one call
// of f: the counts, then each call's keys and arguments in order.
func (f manyForm) flatten(n int, keysOf func(i int) []string, argsOf func(i int) []any) ([]string, []any) {
	keys := make([]string, 0, n*f.keys)
	args := make([]any, 0, 2+n*f.args)
	args = append(args, f.keys, f.args)
	for i := range n {
		keys = append(keys, keysOf(i)...)
		args = append(args, argsOf(i)...)
	}
	return keys, args
}

// answers checks a many form's reply: one answer per call.
func answers(reply any, calls int) ([]any, error) {
	out, ok := reply.([]any)
	if !ok || len(out) != calls {
		return nil, fmt.Errorf("unexpected script reply %v for %d calls", reply, calls)
	}
	return out, nil
}

var (
	_ redlock.BatchReleaser = (*Node)(nil)
	_ redlock.BatchProposer = (*Node)(nil)
)

// ReleaseMany implements redlock.BatchReleaser: one script call for all
// items.
func (n *Node) ReleaseMany(ctx context.Context, items []redlock.ReleaseItem) ([]bool, error) {
	each, err := n.runMany(ctx, "release many", releaseMany, len(items),
		func(i int) []string { return []string{items[i].Key} },
		func(i int) []any { return []any{items[i].Value} })
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(items))
	for i, a := range each {
		out[i] = a == int64(1)
	}
	return out, nil
}

// runMany sends calls (keys and args of each) as one call of the many
// form f and returns their answers, in order.
func (n *Node) runMany(ctx context.Context, op string, f manyForm, calls int, keysOf func(i int) []string, argsOf func(i int) []any) ([]any, error) {
	keys, args := f.flatten(calls, keysOf, argsOf)
	reply, err := n.pipe.run(ctx, f.script, keys, args...).Result()
	if err == nil {
		var each []any
		if each, err = answers(reply, calls); err == nil {
			return each, nil
		}
	}
	return nil, n.wrap(ctx, op, err)
}

// AcquireProposedMany implements redlock.BatchProposer: one script call
// for all items.
func (n *Node) AcquireProposedMany(ctx context.Context, items []redlock.ProposalItem) ([]redlock.Proposal, error) {
	each, err := n.runMany(ctx, "acquire many", acquireProposedMany, len(items),
		func(i int) []string { return []string{items[i].Key, items[i].FenceKey} },
		func(i int) []any {
			return proposedArgs(items[i].Value, items[i].TTL, items[i].Proposal, items[i].Retention)
		})
	if err != nil {
		return nil, err
	}
	out := make([]redlock.Proposal, len(items))
	for i, a := range each {
		if out[i], err = n.proposal(ctx, "acquire many", int64s(a), nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// proposedArgs are acquire_proposed.lua's arguments.
func proposedArgs(value string, ttl time.Duration, proposal int64, retention time.Duration) []any {
	return []any{value, milliseconds(ttl), proposal, milliseconds(retention)}
}

// int64s reads a script's array of integers (nil if it is not one).
func int64s(v any) []int64 {
	arr, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]int64, len(arr))
	for i, x := range arr {
		if out[i], ok = x.(int64); !ok {
			return nil
		}
	}
	return out
}

// mergeBatch groups the calls of a batch that run a script with a many
// form: groups[i] lists the indexes of the calls merged with call i when i
// is the first of a group of two or more; members[i] is true for the
// others of such a group (sent with their first).
//
// A group runs where its first call stood, so its other calls run before
// the calls that stood between: calls of concurrent callers, whose order
// was a race anyway, but a sidecar may also have two calls of its own on
// one key in a batch (a release in flight and the next take of the same
// name). So a call whose keys another script's call in the batch also
// touches is never merged: every two calls that share a key keep their
// order (TestMergeKeepsTheOrderOfCallsOnOneKey), and only calls on keys
// no other script touches move.
func mergeBatch(batch []*call) (groups map[int][]int, merged []bool) {
	shared := sharedKeys(batch)
	first := map[*redis.Script]int{}
	for i, c := range batch {
		f, ok := manyForms[c.script]
		if !ok || !f.fits(c.keys, c.args) || touchesAny(c.keys, shared) {
			continue
		}
		at, seen := first[c.script]
		if !seen {
			first[c.script] = i
			continue
		}
		if groups == nil {
			groups, merged = map[int][]int{}, make([]bool, len(batch))
		}
		if len(groups[at]) == 0 {
			groups[at] = []int{at}
		}
		groups[at] = append(groups[at], i)
		merged[i] = true
	}
	return groups, merged
}

// sharedKeys are the keys that calls of more than one script in batch
// touch (nil when none is).
func sharedKeys(batch []*call) map[string]bool {
	scriptOf := make(map[string]*redis.Script, len(batch))
	var shared map[string]bool
	for _, c := range batch {
		for _, k := range c.keys {
			s, seen := scriptOf[k]
			switch {
			case !seen:
				scriptOf[k] = c.script
			case s != c.script:
				if shared == nil {
					shared = map[string]bool{}
				}
				shared[k] = true
			}
		}
	}
	return shared
}

func touchesAny(keys []string, set map[string]bool) bool {
	for _, k := range keys {
		if set[k] {
			return true
		}
	}
	return false
}

// queueMerged queues one call of the many form for the calls of group on
// pipe.
func queueMerged(ctx context.Context, pipe redis.Pipeliner, batch []*call, group []int) *redis.Cmd {
	f := manyForms[batch[group[0]].script]
	keys, args := f.flatten(len(group),
		func(i int) []string { return batch[group[i]].keys },
		func(i int) []any { return batch[group[i]].args })
	return pipe.EvalSha(ctx, f.script.Hash(), keys, args...)
}

// splitMerged gives each call of group its own answer from the many
// form's reply (or its error).
func splitMerged(ctx context.Context, many *redis.Cmd, group []int, cmds []*redis.Cmd) {
	each, err := many.Result()
	var parts []any
	if err == nil {
		parts, err = answers(each, len(group))
	}
	for k, i := range group {
		cmd := redis.NewCmd(ctx)
		if err != nil {
			cmd.SetErr(err)
		} else {
			cmd.SetVal(parts[k])
		}
		cmds[i] = cmd
	}
}
