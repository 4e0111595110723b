package health

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// violation is one way a master breaks Redlock's independence assumption.
type violation struct {
	node  int    // the master kept out
	guard string // guardDuplicate or guardReplica
	msg   string // names the master(s) involved
}

func hasGuard(vs []violation, guard string) bool {
	for _, v := range vs {
		if v.guard == guard {
			return true
		}
	}
	return false
}

// findViolations checks the masters whose server info is known (nil:
// unknown). Of masters sharing a run id, the first is not a violation: it
// stands for the server, which then counts once.
func findViolations(addrs []string, infos []*redlock.ServerInfo) []violation {
	var vs []violation
	firstWithRunID := make(map[string]int)
	for i, info := range infos {
		if info == nil {
			continue
		}
		if info.Role != "master" {
			vs = append(vs, violation{node: i, guard: guardReplica,
				msg: fmt.Sprintf("%s is a replica (role %q), not an independent master: its keys follow another master's", addrs[i], info.Role)})
		}
		if info.RunID == "" {
			continue
		}
		if j, seen := firstWithRunID[info.RunID]; seen {
			vs = append(vs, violation{node: i, guard: guardDuplicate,
				msg: fmt.Sprintf("%s and %s are the same server (run_id %s): it would count twice towards a quorum", addrs[j], addrs[i], short(info.RunID))})
			continue
		}
		firstWithRunID[info.RunID] = i
	}
	return vs
}

// CheckIndependence reads the server info of every node that can describe
// its server, in parallel and bounded by ctx, and returns an error naming
// every definite violation of Redlock's independence assumption: two nodes
// that are one server (the same run id), and nodes that are not masters.
//
// A node that does not answer is not a violation: it is listed in
// unchecked with the reason, so a caller can refuse to start on a
// violation yet start while some masters are merely down (a Checker checks
// them in its rounds once they answer). Nodes that are not
// redlock.ServerInfoReaders are skipped.
func CheckIndependence(ctx context.Context, nodes []redlock.Node) (unchecked []error, err error) {
	infos := make([]*redlock.ServerInfo, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		reader, ok := n.(redlock.ServerInfoReader)
		if !ok {
			continue
		}
		wg.Go(func() {
			info, err := reader.ServerInfo(ctx)
			if err != nil {
				errs[i] = err // nodes name themselves in their errors
				return
			}
			infos[i] = &info
		})
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			unchecked = append(unchecked, e)
		}
	}
	var violations []error
	for _, v := range findViolations(addrs(nodes), infos) {
		violations = append(violations, errors.New(v.msg))
	}
	return unchecked, errors.Join(violations...)
}
