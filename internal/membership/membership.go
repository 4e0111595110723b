// Package membership checks that the sidecars using one quorum group at
// the same time run master lists whose quorums intersect.
//
// A named group lets its masters change without moving lock names, and
// that is where two sidecars can disagree: during a rollout that replaces
// m3 with m4 in group "east", old sidecars lock on {m1,m2,m3} and new ones
// on {m1,m2,m4}; one can hold a lock on {m2,m3} while another holds it on
// {m1,m4}, each a majority of its own list. Two lists A and B may be in
// use at once only if every majority of A meets every majority of B:
//
//	q(A) + q(B) > |A ∪ B|, where q(X) = |X|/2 + 1
//
// (Compatible). Removing one master (3→2) or adding one (2→3) keeps to
// it; replacing one in a single step does not. So a master is replaced one
// change at a time: roll out the list without the old master, wait until
// no sidecar runs the old list plus one key ttl, then roll out the list
// with the new master.
//
// A sidecar cannot see another's configuration, only what the masters
// record, so Check records the sidecar's list on every master of the group
// (redlock.MemberRecorder) under Key, for a ttl, and reads back every list
// recorded there and not yet expired. A sidecar that calls Check at
// start-up and again well within every ttl (say each health round) keeps
// its record live; a list seen live that is incompatible with ours is
// ErrSplitMembership.
//
// What it does not guarantee:
//   - Only masters both lists share can report the other list; two lists
//     with no master in common (a whole group replaced under one name) are
//     never detected.
//   - It detects, it does not prevent. Of two sidecars starting at the same
//     moment with incompatible lists, the one that records second on a
//     shared master sees the other, not necessarily both; and a sidecar
//     already running learns of a newcomer only at its next Check.
//   - A master that loses its data (a restart without persistence) loses
//     the records too, and masters that do not answer, or do not implement
//     MemberRecorder, are skipped (Result says which): a split can go
//     unseen while only such masters are shared.
//   - The ttl must outlast the interval between two Checks plus the
//     longest lock ttl: a lock granted under an old list outlives the last
//     sidecar running it by up to a key ttl, and its record must not expire
//     before that.
package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// ErrSplitMembership means that another master list of the group is in
// use whose majorities need not intersect ours, so one lock could be
// granted twice. Check wraps it with the details.
var ErrSplitMembership = errors.New("membership: split quorum")

// procedure is the safe way to replace a master, in one sentence.
const procedure = "to replace a master change one at a time: roll out the list without the old master, " +
	"wait until no sidecar runs the old list plus one key ttl, then roll out the list with the new master"

// Key is where a group's member-list records are kept on its masters. A
// lock's key is prefix+name with no '#' in name, and its fence key adds
// one '#' (redlock.FenceKey); Key adds at least two, so it never collides
// with either under any prefix.
func Key(prefix, group string) string { return prefix + "#group#" + group }

// Canonical is the form in which lists are recorded and compared: the
// addresses trimmed, without empty ones or duplicates, sorted and joined
// with commas. The order in a configuration does not matter.
func Canonical(addrs []string) string { return strings.Join(set(addrs), ",") }

// set is the canonical, sorted set of addrs.
func set(addrs []string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// split reads a recorded list back into addresses.
func split(list string) []string { return set(strings.Split(list, ",")) }

// Compatible reports whether lists a and b may be in use at once for one
// group: whether every majority of a intersects every majority of b, which
// holds exactly when q(a) + q(b) > |a ∪ b| with q(x) = |x|/2 + 1. Lists
// are compared as canonical sets. An empty list has no majority at all, so
// it is compatible with every list.
func Compatible(a, b []string) bool {
	sa, sb := set(a), set(b)
	if len(sa) == 0 || len(sb) == 0 {
		return true
	}
	union := len(set(slices.Concat(sa, sb)))
	return quorum(len(sa))+quorum(len(sb)) > union
}

func quorum(n int) int { return n/2 + 1 }

// Result is what one Check saw.
type Result struct {
	// Group and Members are the group checked and our list, canonical.
	Group, Members string
	// Lists maps every live list seen (canonical, ours included) to the
	// masters that reported it, in the order of Check's nodes.
	Lists map[string][]string
	// Incompatible are the lists of Lists that conflict with ours, sorted.
	Incompatible []string
	// Answered are the masters that recorded our list.
	Answered []string
	// Unsupported are the masters whose node does not implement
	// redlock.MemberRecorder; they were not asked.
	Unsupported []string
	// Unanswered are the masters that failed or did not answer in time.
	Unanswered []Failure
}

// Failure is a master that did not answer, and why.
type Failure struct {
	Addr string
	Err  error
}

// Check records members as the list of group on each of nodes, in
// parallel and each call bounded by timeout (no bound when it is 0), with
// the given ttl, and compares every live list the masters report with
// ours. It returns an error wrapping ErrSplitMembership when one is
// incompatible, naming the group, the other lists and the masters that
// reported them. Masters that do not answer or do not record lists are
// skipped and listed in the Result; they never fail the check, so a check
// that reached no master passes (len(Result.Answered) == 0 tells). Our
// list is recorded even when the check fails, so that sidecars running
// the other list see the split at their next Check too.
//
// prefix is the key prefix of the group's locks (see Key); members are
// the group's configured addresses, normally those of nodes.
func Check(ctx context.Context, prefix, group string, members []string, nodes []redlock.Node, ttl, timeout time.Duration) (Result, error) {
	ours := Canonical(members)
	res := Result{Group: group, Members: ours, Lists: map[string][]string{}}
	switch {
	case ours == "":
		return res, fmt.Errorf("membership: group %q: no masters to record", group)
	case ttl <= 0:
		return res, fmt.Errorf("membership: group %q: record ttl %v is not positive", group, ttl)
	}

	key := Key(prefix, group)
	type answer struct {
		live        []string
		err         error
		unsupported bool
	}
	answers := make([]answer, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		recorder, ok := n.(redlock.MemberRecorder)
		if !ok {
			answers[i].unsupported = true
			continue
		}
		wg.Go(func() {
			callCtx, cancel := ctx, context.CancelFunc(func() {})
			if timeout > 0 {
				callCtx, cancel = context.WithTimeout(ctx, timeout)
			}
			defer cancel()
			answers[i].live, answers[i].err = recorder.RecordMembers(callCtx, key, ours, ttl)
		})
	}
	wg.Wait()

	for i, a := range answers {
		addr := nodes[i].Addr()
		switch {
		case a.unsupported:
			res.Unsupported = append(res.Unsupported, addr)
			continue
		case a.err != nil:
			res.Unanswered = append(res.Unanswered, Failure{Addr: addr, Err: a.err})
			continue
		}
		res.Answered = append(res.Answered, addr)
		seen := map[string]bool{}
		for _, list := range a.live {
			list = Canonical(split(list))
			if seen[list] {
				continue
			}
			seen[list] = true
			res.Lists[list] = append(res.Lists[list], addr)
		}
	}

	mine := split(ours)
	for list := range res.Lists {
		if !Compatible(mine, split(list)) {
			res.Incompatible = append(res.Incompatible, list)
		}
	}
	if len(res.Incompatible) == 0 {
		return res, nil
	}
	slices.Sort(res.Incompatible)
	others := make([]string, len(res.Incompatible))
	for i, list := range res.Incompatible {
		others[i] = fmt.Sprintf("[%s] (recorded on %s)", list, strings.Join(res.Lists[list], ", "))
	}
	return res, fmt.Errorf("%w: group %q runs on masters [%s] here, but within the last %v other sidecars ran it on masters %s; "+
		"a majority of one list can miss a majority of the other, so a lock could be granted twice; %s",
		ErrSplitMembership, group, ours, ttl, strings.Join(others, " and "), procedure)
}
