package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/injector"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/pkg/client"
)

// Exit codes of sidelock's verbs, besides a command's own under exec.
// They follow sysexits(3) where one fits, so scripts can tell them apart.
const (
	exitNo          = 1   // status: the answer is no (the sidecar is not ready; the lock is free)
	exitUsage       = 64  // bad verb, flags or arguments, or a value the sidecar refused as invalid
	exitUnavailable = 69  // the sidecar could not be reached or refused the request
	exitNotAcquired = 75  // the lock was not acquired within --wait (EX_TEMPFAIL: try later)
	exitLockLost    = 79  // the lock ended without being asked to (lost, max_hold, sidecar shut down)
	exitCannotRun   = 126 // exec: the command exists but could not be started
	exitNotFound    = 127 // exec: the command was not found
)

// exitCode asks main to exit with code, after printing err if any.
type exitCode struct {
	code int
	err  error
	// conflict marks a lock held by another (at once, or past --wait): the
	// code --conflict-exit-code replaces.
	conflict bool
}

func (e *exitCode) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitCode) Unwrap() error { return e.err }

func exitWith(code int, format string, args ...any) error {
	return &exitCode{code: code, err: fmt.Errorf(format, args...)}
}

// conflictWith is a lock held by another, not acquired at once or within
// --wait: exit 75 unless --conflict-exit-code says otherwise.
func conflictWith(format string, args ...any) error {
	return &exitCode{code: exitNotAcquired, err: fmt.Errorf(format, args...), conflict: true}
}

// addConflictFlag adds --conflict-exit-code (exec's and lock's), flock's -E:
// scripts ported from `flock -n` (which exits 1) keep their meaning.
func addConflictFlag(fs *flag.FlagSet, code *int) {
	fs.IntVar(code, "conflict-exit-code", exitNotAcquired, "exit with `N` (0..255) when the lock is held by another, at once or past --wait (flock -E; flock -n exits 1)")
}

// checkConflictCode refuses an exit code a process cannot have.
func checkConflictCode(verbName string, code int) error {
	if code < 0 || code > 255 {
		return usageError(verbName, "--conflict-exit-code %d: an exit code is 0..255", code)
	}
	return nil
}

// withConflictCode gives a conflict the exit code --conflict-exit-code chose.
func withConflictCode(err error, code int) error {
	var ec *exitCode
	if errors.As(err, &ec) && ec.conflict {
		return &exitCode{code: code, err: ec.err, conflict: true}
	}
	return err
}

// errHelpShown ends a verb whose -h printed its help: exit 0.
var errHelpShown = errors.New("help shown")

// usageError is a short complaint and where to read more, never the
// whole flag list: exit 64.
func usageError(verb, format string, args ...any) error {
	return exitWith(exitUsage, "%s\nrun '%s'", fmt.Sprintf(format, args...), helpCommand(verb))
}

func helpCommand(verb string) string {
	if verb == "" {
		return "sidelock help"
	}
	return "sidelock help " + verb
}

// A verb is one of sidelock's commands, as `sidelock help` describes it.
type verb struct {
	name    string
	args    string // what its usage line shows after the flags
	summary string // one line, for `sidelock help`
	about   string // what `sidelock help VERB` says before the flags
	// exits are its exit codes (nil: 0 on success, 1 on failure).
	exits []exitRow
	run   runFunc
	// serve's help lists the sidecar's settings too.
	settings bool
}

// runFunc runs a verb with its arguments (after the verb), the
// environment and the standard streams.
type runFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

type exitRow struct {
	code    string
	meaning string
}

// verbs are the listed verbs, in the order `sidelock help` shows them.
func verbs() []verb {
	return []verb{
		{name: "serve", args: "", summary: "run the sidecar (the default verb)", run: runServe, settings: true,
			about: "Runs the sidecar: the lock API on SIDELOCK_LISTEN_ADDR and /healthz, /readyz and /metrics on\n" +
				"SIDELOCK_ADMIN_ADDR, over the Redis masters in SIDELOCK_REDIS_ADDRS, until SIGINT or SIGTERM.\n" +
				"It is configured by the environment (below; docs/configuration.md has the same table)."},
		{name: "exec", args: "NAME -- COMMAND [ARGS...]", summary: "run a command while holding a lock, a lock set, a semaphore's permit, a read/write lock or the leadership", run: runExec,
			about: "Runs COMMAND while holding the lock NAME through the local sidecar, with SIDELOCK_LOCK_NAME,\n" +
				"SIDELOCK_TOKEN and SIDELOCK_FENCE in its environment. The lock is released only once the\n" +
				"command and every process it started in its group are dead. If the lock is lost, the command\n" +
				"gets SIGTERM, then SIGKILL after --grace or just before the lock's valid_until.\n" +
				"A NAME with commas (a,b,c) is a lock set: exec holds all of its locks at once, all or nothing,\n" +
				"taken in sorted order (sets that overlap cannot deadlock), and the command is stopped if any\n" +
				"of them ends; SIDELOCK_LOCK_NAME is the set's sorted name, and SIDELOCK_FENCES=name=fence,...\n" +
				"replaces SIDELOCK_FENCE. A lock set takes no --permits, --mode or --leader.\n" +
				"With --permits N it holds one of the N permits of the semaphore NAME instead (SIDELOCK_SLOT\n" +
				"says which slot; the fence orders that slot's holders). With --mode shared|exclusive it holds\n" +
				"the read/write lock NAME as a reader or the writer (SIDELOCK_MODE; a reader also gets\n" +
				"SIDELOCK_SLOT, a writer a fence above every earlier writer's). With --leader it campaigns for the\n" +
				"lock NAME, waiting as long as it takes, and runs COMMAND once elected: the owner (--owner,\n" +
				"default the hostname) names the leader, the fence is its term.",
			exits: []exitRow{
				{"the command's", "the command ran holding the lock (128+n if signal n ended it)"},
				{fmt.Sprint(exitNotAcquired), "the lock (a permit, a lock set) was held by another, at once or past --wait (--conflict-exit-code N instead), or a signal came first"},
				{fmt.Sprint(exitLockLost), "the lock ended while the command ran; the command was stopped"},
				{fmt.Sprint(exitUnavailable), "the sidecar could not be reached or refused the request"},
				{fmt.Sprint(exitUsage), "usage error (unknown flag, missing or invalid NAME or lock set, a value the sidecar refused, permits mismatch)"},
				{fmt.Sprintf("%d / %d", exitCannotRun, exitNotFound), "the command could not be run / was not found"},
			}},
		{name: "lock", args: "NAME", summary: "hold a lock until interrupted", run: runLock,
			about: "Acquires the lock NAME through the local sidecar and holds it over one connection until\n" +
				"SIGINT or SIGTERM, then releases it. Once acquired it prints the lease on stdout, one JSON\n" +
				"line (name, token, owner, fence, valid_until...), and nothing else; warnings go to stderr.\n" +
				"If this process dies, the connection closes and the sidecar releases the lock.",
			exits: []exitRow{
				{"0", "the lock was held, then released on SIGINT or SIGTERM"},
				{fmt.Sprint(exitNotAcquired), "the lock was held by another, at once or past --wait (--conflict-exit-code N instead), or a signal came first"},
				{fmt.Sprint(exitLockLost), "the lock ended without being asked to: lost, max_hold reached, sidecar shut down"},
				{fmt.Sprint(exitUnavailable), "the sidecar could not be reached or refused the request"},
				{fmt.Sprint(exitUsage), "usage error (unknown flag, missing or invalid NAME, a value the sidecar refused)"},
			}},
		{name: "status", args: "[NAME]", summary: "show the sidecar's readiness, or a lock's state", run: runStatus,
			about: "Without NAME, shows the sidecar's readiness (its admin /readyz): the quorum and each master.\n" +
				"With NAME, shows who holds the lock, as the masters say (GET /locks/NAME).",
			exits: []exitRow{
				{"0", "ready; with NAME: the lock is held"},
				{fmt.Sprint(exitNo), "not ready; with NAME: the lock is free"},
				{fmt.Sprint(exitUnavailable), "the sidecar could not be reached or could not answer (no quorum)"},
				{fmt.Sprint(exitUsage), "usage error (unknown flag, invalid NAME)"},
			}},
		{name: "watch", args: "NAME", summary: "print a lock's changes (who holds it, who leads) as they happen", run: runWatch,
			about: "Follows the lock NAME through the local sidecar (GET /locks/NAME?watch=true, no token) and\n" +
				"prints one JSON line per change on stdout: event (state, acquired, released, unavailable),\n" +
				"name, held, owner, fence, valid_until, since (when the sidecar first saw this holder), reason\n" +
				"(released: released or expired) and detail (unavailable). The first line is the state; a\n" +
				"broken stream is reconnected (an unavailable line, then the state again). It runs until\n" +
				"SIGINT or SIGTERM; with --once it prints the current state and exits.",
			exits: []exitRow{
				{"0", "ended by SIGINT or SIGTERM; with --once: the state was printed"},
				{fmt.Sprint(exitUnavailable), "the sidecar could not be reached or refused the watch; with --once: it could not read the masters"},
				{fmt.Sprint(exitUsage), "usage error (unknown flag, missing or invalid NAME)"},
			}},
		{name: "version", summary: "print the version, the Go version and the platform", run: runVersion,
			about: "Prints one line: sidelock VERSION GOVERSION OS/ARCH."},
		{name: "injector", summary: "serve the admission webhook that adds the sidecar to pods", run: runInjector,
			about: fmt.Sprintf("Serves the mutating admission webhook that adds the sidelock sidecar to pods labelled\n"+
				"%s: \"true\" (deployed by the Helm chart). Each flag also reads the environment variable it names.", injector.InjectLabel)},
		{name: "help", args: "[VERB]", summary: "show the help of sidelock or of one verb", run: runHelp,
			about: "Shows what sidelock does and its verbs, or one verb's usage, flags and exit codes."},
	}
}

// lookupVerb finds a listed verb by name.
func lookupVerb(name string) (verb, bool) {
	for _, v := range verbs() {
		if v.name == name {
			return v, true
		}
	}
	return verb{}, false
}

// newFlags is a verb's flag set: it prints nothing itself, so that a
// mistake is one short line (usageError) and -h is the verb's help.
func newFlags(v string) *flag.FlagSet {
	fs := flag.NewFlagSet("sidelock "+v, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses a verb's flags. -h, -help and --help print the verb's
// help on stdout and answer errHelpShown.
func parseFlags(fs *flag.FlagSet, verbName string, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		v, _ := lookupVerb(verbName)
		if werr := writeVerbHelp(stdout, v, fs); werr != nil {
			return werr
		}
		return errHelpShown
	}
	if err != nil {
		return usageError(verbName, "%s: %v", verbName, err)
	}
	return nil
}

// isSet says whether the command line set the flag name.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// checkName refuses a lock name before any request: the sidecar would
// refuse it too, and a name that means something in a URL must never
// reach one.
func checkName(verbName, name string) error {
	if err := lease.ValidateName(name); err != nil {
		return usageError(verbName, "lock name %q: %v", name, err)
	}
	return nil
}

// writeOverview is `sidelock help`: the verbs, then serve's help (the
// default verb, and the settings every deployment reads).
func writeOverview(w io.Writer) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "sidelock gives the processes of a pod distributed locks over localhost HTTP (Redlock\n"+
		"over independent Redis masters). One binary: the sidecar, and its clients for shell scripts.\n\n"+
		"usage: sidelock [VERB] [flags] [args]\n\nverbs:\n")
	for _, v := range verbs() {
		fmt.Fprintf(tw, "  %s\t%s\n", v.name, v.summary)
	}
	fmt.Fprintf(tw, "\nRun 'sidelock help VERB' (or 'sidelock VERB -h') for a verb's flags and exit codes.\n\n")
	if err := tw.Flush(); err != nil {
		return err
	}
	serve, _ := lookupVerb("serve")
	fs, _ := serveFlags()
	return writeVerbHelp(w, serve, fs)
}

// writeVerbHelp is `sidelock help VERB`: usage, what it does, its flags,
// exit codes and, for serve, the settings; columns aligned.
func writeVerbHelp(w io.Writer, v verb, fs *flag.FlagSet) error {
	tw := newTable(w)
	usage := "sidelock " + v.name
	if hasFlags(fs) {
		usage += " [flags]"
	}
	if v.args != "" {
		usage += " " + v.args
	}
	fmt.Fprintf(tw, "usage: %s\n\n%s\n", usage, v.about)
	if hasFlags(fs) {
		fmt.Fprintf(tw, "\nflags:\n")
		fs.VisitAll(func(f *flag.Flag) { writeFlag(tw, f) })
	}
	if len(v.exits) > 0 {
		fmt.Fprintf(tw, "\nexit codes:\n")
		for _, e := range v.exits {
			fmt.Fprintf(tw, "  %s\t%s\n", e.code, e.meaning)
		}
	}
	if v.settings {
		fmt.Fprintf(tw, "\nconfiguration (environment):\n")
		if err := writeSettings(tw); err != nil {
			return err
		}
	}
	return tw.Flush()
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// writeFlag is one row of a verb's flags: -name TYPE, then its usage and
// default.
func writeFlag(w io.Writer, f *flag.Flag) {
	typ, usage := flag.UnquoteUsage(f)
	if def := f.DefValue; def != "" && def != "0" && def != "0s" && def != "false" {
		usage += fmt.Sprintf(" (default %s)", def)
	}
	lines := wrap(usage, meaningWidth)
	fmt.Fprintf(w, "  -%s %s\t%s\n", f.Name, typ, lines[0])
	for _, more := range lines[1:] {
		fmt.Fprintf(w, "  \t%s\n", more)
	}
}

// writeSettings aligns config.Usage's tab-separated table, without its
// empty "required" column, wrapping the meanings.
func writeSettings(w io.Writer) error {
	var raw strings.Builder
	if err := config.Usage(&raw); err != nil {
		return err
	}
	for line := range strings.SplitSeq(strings.TrimRight(raw.String(), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			continue
		}
		meaning := wrap(f[4], meaningWidth)
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", f[0], f[1], f[2], meaning[0])
		for _, more := range meaning[1:] {
			fmt.Fprintf(w, "  \t\t\t%s\n", more)
		}
	}
	return nil
}

// meaningWidth keeps a setting's row within a wide terminal.
const meaningWidth = 72

// wrap breaks text into lines of at most width runes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	var line strings.Builder
	for _, word := range strings.Fields(text) {
		if line.Len() > 0 && line.Len()+1+len(word) > width {
			lines = append(lines, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(word)
	}
	return append(lines, line.String())
}

// newTable aligns tab-separated cells, two spaces apart.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// runHelp is `sidelock help [VERB]`.
func runHelp(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("help")
	if err := parseFlags(fs, "help", args, stdout); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		return writeOverview(stdout)
	case 1:
		v, ok := lookupVerb(fs.Arg(0))
		if !ok {
			return usageError("", "no verb %q", fs.Arg(0))
		}
		return v.run(ctx, []string{"-h"}, getenv, stdout, stderr) // each verb's help is its -h
	default:
		return usageError("help", "help takes one VERB at most, got %q", fs.Args())
	}
}

// runVersion is `sidelock version`.
func runVersion(_ context.Context, args []string, _ func(string) string, stdout, _ io.Writer) error {
	fs := newFlags("version")
	if err := parseFlags(fs, "version", args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("version", "version takes no arguments, got %q", fs.Args())
	}
	_, err := fmt.Fprintf(stdout, "sidelock %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

// sidecarFlags locate the local sidecar for the client verbs: its lock
// API and its admin listener. The API token comes from the environment
// only ($SIDELOCK_API_TOKEN), never a flag, which ps would show.
type sidecarFlags struct {
	api     string
	admin   string
	timeout time.Duration
}

// addAPI adds -addr.
func (s *sidecarFlags) addAPI(fs *flag.FlagSet, getenv func(string) string) {
	api := getenv("SIDELOCK_ADDR")
	if api == "" {
		api = client.DefaultAddr
	}
	fs.StringVar(&s.api, "addr", api, "`URL` of the sidecar's lock API, or unix:///path/api.sock for its Unix socket; $SIDELOCK_ADDR sets the default")
}

// addAdmin adds -admin and -timeout (status's).
func (s *sidecarFlags) addAdmin(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&s.admin, "admin", adminURL(getenv), "`URL` of the sidecar's admin listener (/readyz); the default follows $SIDELOCK_ADMIN_ADDR")
	fs.DurationVar(&s.timeout, "timeout", 5*time.Second, "give up on the sidecar after this long")
}

// adminURL is where the sidecar of this pod serves /readyz: its
// SIDELOCK_ADMIN_ADDR (set in the sidecar's own container) or that
// setting's default, on loopback when it listens on every address.
func adminURL(getenv func(string) string) string {
	addr := getenv("SIDELOCK_ADMIN_ADDR")
	if addr == "" {
		s, _ := config.Lookup("SIDELOCK_ADMIN_ADDR")
		addr, _ = s.Default.(string)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func (s sidecarFlags) client(getenv func(string) string) *client.Client {
	base, httpClient := apiEndpoint(s.api)
	return client.New(base, httpClient).WithToken(getenv("SIDELOCK_API_TOKEN"))
}

// apiEndpoint is the base URL and HTTP client (nil: the default) for -addr:
// an http:// URL, or the sidecar's Unix socket written as in
// SIDELOCK_LISTEN_ADDR (unix:///run/sidelock/api.sock), reached under a
// placeholder host.
func apiEndpoint(addr string) (string, *http.Client) {
	path, ok := strings.CutPrefix(addr, config.UnixScheme)
	if !ok {
		return addr, nil
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // a proxy could not reach the socket
	transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	return "http://sidelock", &http.Client{Transport: transport}
}

// acquireFlags are the acquisition's flags, exec's and lock's.
func addAcquireFlags(fs *flag.FlagSet, o *client.Options) {
	fs.DurationVar(&o.Wait, "wait", 0, "how long to wait for the lock (0: try once)")
	fs.DurationVar(&o.TTL, "ttl", 0, "bound on the keys' ttl on the masters (default: the sidecar's)")
	fs.DurationVar(&o.MaxHold, "max-hold", 0, "end the hold after this long (default: the sidecar's SIDELOCK_MAX_HOLD)")
	fs.StringVar(&o.Owner, "owner", "", "`LABEL` shown to anyone who inspects the lock (default: the hostname)")
}

// defaultOwner is the hostname: in a pod, the pod's name.
func defaultOwner(o *client.Options) {
	if o.Owner == "" {
		o.Owner, _ = os.Hostname()
	}
}

// acquireFailed maps a failed acquisition to exec's and lock's exit
// codes.
func acquireFailed(ctx context.Context, verbName, name string, o client.Options, api string, err error) error {
	var apiErr *client.Error
	switch {
	case errors.Is(err, client.ErrLockHeld) && o.Wait == 0:
		return conflictWith("lock %q is held by another (try once: no --wait)", name)
	case errors.Is(err, client.ErrLockHeld):
		return conflictWith("lock %q not acquired within --wait %v", name, o.Wait)
	case ctx.Err() != nil:
		return exitWith(exitNotAcquired, "interrupted before lock %q was acquired", name)
	case errors.As(err, &apiErr) && apiErr.Status == 400:
		return usageError(verbName, "the sidecar refused the request: %s (%s)", apiErr.Detail, apiErr.Code)
	default:
		return exitWith(exitUnavailable, "sidecar at %s: %w", api, err)
	}
}
