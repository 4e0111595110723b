package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sidelock/sidelock/internal/health"
)

// statusOptions are the flags and argument of `sidelock status`.
type statusOptions struct {
	sidecar sidecarFlags
	name    string // empty: the sidecar's readiness
}

func parseStatus(args []string, getenv func(string) string, stdout io.Writer) (statusOptions, error) {
	var o statusOptions
	fs := newFlags("status")
	o.sidecar.addAPI(fs, getenv)
	o.sidecar.addAdmin(fs, getenv)
	if err := parseFlags(fs, "status", args, stdout); err != nil {
		return o, err
	}
	if fs.NArg() > 1 {
		return o, usageError("status", "status takes one NAME at most, got %q", fs.Args())
	}
	if o.name = fs.Arg(0); o.name != "" {
		if err := checkName("status", o.name); err != nil {
			return o, err
		}
	}
	return o, nil
}

// runStatus is `sidelock status [NAME]`.
func runStatus(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseStatus(args, getenv, stdout)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.sidecar.timeout)
	defer cancel()
	if o.name == "" {
		return readiness(ctx, o.sidecar.admin, stdout)
	}
	st, err := o.sidecar.client(getenv).Inspect(ctx, o.name)
	if err != nil {
		return exitWith(exitUnavailable, "sidecar at %s: %w", o.sidecar.api, err)
	}
	if !st.Held {
		fmt.Fprintf(stdout, "%s: free\n", st.Name)
		return &exitCode{code: exitNo}
	}
	fmt.Fprintf(stdout, "%s: held by %s, valid until %s (for %v)", st.Name, st.Owner,
		st.ValidUntil.Format(time.RFC3339Nano), time.Until(st.ValidUntil).Round(time.Millisecond))
	if st.Fence != 0 {
		fmt.Fprintf(stdout, ", fence %d", st.Fence)
	}
	fmt.Fprintln(stdout)
	return nil
}

// readiness shows the sidecar's /readyz: exit 0 ready, 1 not ready.
func readiness(ctx context.Context, admin string, w io.Writer) error {
	r, err := fetchReadyz(ctx, admin)
	if err != nil {
		return exitWith(exitUnavailable, "sidecar admin listener at %s: %w", admin, err)
	}
	verdict := "ready"
	if !r.Ready {
		verdict = "not ready"
	}
	if len(r.Groups) > 0 {
		fmt.Fprintf(w, "%s (ready policy %q)\n", verdict, r.ReadyPolicy)
	} else {
		fmt.Fprintf(w, "%s: %d of %d masters up, %d counted, quorum %d\n", verdict, r.Up, len(r.Nodes), r.Eligible, r.Quorum)
	}
	tw := newTable(w)
	if len(r.Groups) > 0 {
		fmt.Fprintf(tw, "GROUP\tREADY\tUP\tCOUNTED\tQUORUM\n")
		for _, g := range r.Groups {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", g.Name, yesNo(g.Ready), g.Up, g.Eligible, g.Quorum)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "MASTER\tUP\tCOUNTED\tNOTE\n")
	for _, m := range r.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s", m.Addr, yesNo(m.Up), yesNo(m.Eligible))
		if note := strings.Join(nonEmpty(m.Error, m.Problem, m.Warning), "; "); note != "" {
			fmt.Fprintf(tw, "\t%s", note)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !r.Ready {
		return &exitCode{code: exitNo}
	}
	return nil
}

// fetchReadyz reads /readyz, which answers its report with 200 (ready)
// and 503 (not ready) alike.
func fetchReadyz(ctx context.Context, admin string) (health.Report, error) {
	var r health.Report
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(admin, "/")+"/readyz", nil)
	if err != nil {
		return r, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return r, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusServiceUnavailable {
		return r, fmt.Errorf("/readyz answered %s", res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		return r, fmt.Errorf("decoding /readyz: %w", err)
	}
	return r, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}
