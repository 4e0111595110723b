// Package leasecheck holds the rules that judge what sidelock published to its
// callers, apart from how the records were gathered: the chaos suite
// (test/chaos) records grants in its clients, the real-node suite
// (test/k8s-e2e/node) from its pods' logs, and both judge them here.
//
// The rules, for each name held exclusively:
//   - a promise (a grant, standing until the latest valid_until published
//     to it, or until its holder began to release it if sooner) is broken
//     when another grant of the name is answered before it ends;
//   - fence order is broken when a grant's fence is not above the fence of
//     every section of the name that ended before it began.
package leasecheck

import (
	"slices"
	"time"
)

// Promise is one grant as its publications describe it.
type Promise struct {
	// Key is what the grant holds exclusively (a lock's name, a semaphore's
	// slot, a read/write lock's writer); "" for shared holds, not judged.
	Key string
	// Granted is when the holder learnt of the grant (a later time than the
	// true grant makes the check stricter); End is when the promise stopped
	// standing.
	Granted, End time.Time
}

// Broken is the promise broken by the most: promises[Earlier] still stood
// for By when promises[Later] was granted.
type Broken struct {
	Earlier, Later int
	By             time.Duration
}

// BrokenPromises counts grants answered while an earlier grant of the same
// key still stood, and returns the worst (nil when none).
func BrokenPromises(promises []Promise) (int, *Broken) {
	n := 0
	var worst *Broken
	sweep(len(promises), func(i int) string { return promises[i].Key },
		func(i int) time.Time { return promises[i].Granted }, func(i int) time.Time { return promises[i].End },
		func(earlier, later int) {
			n++
			if by := promises[earlier].End.Sub(promises[later].Granted); worst == nil || by > worst.By {
				worst = &Broken{Earlier: earlier, Later: later, By: by}
			}
		})
	return n, worst
}

// Section is the time a holder acted under a grant, with the grant's fence.
type Section struct {
	Key         string
	Fence       int64
	Enter, Exit time.Time
}

// FenceViolation is a section whose fence is not above Highest, the fence
// of a section of its key that had ended before it began.
type FenceViolation struct {
	Section int
	Highest int64
}

// FenceOrder counts sections whose fence is not above the fence of every
// section of the same key that ended before they began, and returns the
// first found (nil when none).
func FenceOrder(sections []Section) (int, *FenceViolation) {
	n := 0
	var first *FenceViolation
	for _, group := range groupByKey(len(sections), func(i int) string { return sections[i].Key }) {
		byExit := slices.Clone(group)
		slices.SortFunc(byExit, func(a, b int) int { return sections[a].Exit.Compare(sections[b].Exit) })
		slices.SortFunc(group, func(a, b int) int { return sections[a].Enter.Compare(sections[b].Enter) })
		j := 0
		var highest int64
		for _, i := range group {
			for j < len(byExit) && sections[byExit[j]].Exit.Before(sections[i].Enter) {
				highest = max(highest, sections[byExit[j]].Fence)
				j++
			}
			if sections[i].Fence <= highest {
				n++
				if first == nil {
					first = &FenceViolation{Section: i, Highest: highest}
				}
			}
		}
	}
	return n, first
}

// Overlap is a section that began while an earlier one of its key (the
// one ending last so far) had not ended.
type Overlap struct{ Earlier, Later int }

// Overlaps counts sections that began before an earlier section of the
// same key ended, and returns the first found (nil when none).
func Overlaps(sections []Section) (int, *Overlap) {
	n := 0
	var first *Overlap
	sweep(len(sections), func(i int) string { return sections[i].Key },
		func(i int) time.Time { return sections[i].Enter }, func(i int) time.Time { return sections[i].Exit },
		func(earlier, later int) {
			n++
			if first == nil {
				first = &Overlap{Earlier: earlier, Later: later}
			}
		})
	return n, first
}

// sweep visits the items of each key in start order (stable) and calls
// found for each that starts before the earlier item ending last has
// ended: the one rule under both a broken promise and an overlap.
func sweep(n int, key func(int) string, start, end func(int) time.Time, found func(earlier, later int)) {
	for _, group := range groupByKey(n, key) {
		slices.SortStableFunc(group, func(a, b int) int { return start(a).Compare(start(b)) })
		last := -1 // the earlier item that ends last
		for _, i := range group {
			if last >= 0 && start(i).Before(end(last)) {
				found(last, i)
			}
			if last < 0 || end(i).After(end(last)) {
				last = i
			}
		}
	}
}

// groupByKey groups the indexes 0..n-1 by key, skipping "", in index order.
func groupByKey(n int, key func(int) string) [][]int {
	var keys []string
	groups := map[string][]int{}
	for i := range n {
		k := key(i)
		if k == "" {
			continue
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	out := make([][]int, 0, len(keys))
	for _, k := range keys {
		out = append(out, groups[k])
	}
	return out
}
