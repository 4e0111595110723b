package config

// A master is listed in SIDELOCK_REDIS_ADDRS, SIDELOCK_REDIS_GROUPS and
// SIDELOCK_REDIS_GROUPS_PREVIOUS either as a plain host:port or as a Redis
// URL that carries its credentials:
//
//	host:port
//	redis://[user[:password]@]host:port[/0]
//	rediss://[user[:password]@]host:port[/0]   (TLS)
//
// A URL's user and password are secrets: once parsed, a master is known by
// its host:port alone, in logs, errors, /readyz, metric labels, default
// group names and the member lists recorded on the masters, and its
// credentials reach only the Redis client. An entry that is neither form is
// refused without being quoted: a mistyped URL may hold a password in a
// place no parser can tell, so no part of it is safe to echo.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// MasterAddr is one master as configured. Only its host:port can be
// printed: it formats (every fmt verb) and logs as that, and its
// credentials are unexported, so encoding/json drops them too.
type MasterAddr struct {
	hostPort string
	// scheme is "redis" or "rediss" for a URL, "" for a plain host:port.
	scheme             string
	username, password string
}

// String is the master's host:port, the only name it goes by.
func (m MasterAddr) String() string { return m.hostPort }

// Format prints the host:port whatever the verb, so that not even %#v or
// %+v of a MasterAddr (or a struct holding one) shows the credentials.
func (m MasterAddr) Format(f fmt.State, verb rune) {
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), m.hostPort)
}

// LogValue logs the master as its host:port.
func (m MasterAddr) LogValue() slog.Value { return slog.StringValue(m.hostPort) }

// hasCredentials is true for a URL that named a user or a password.
func (m MasterAddr) hasCredentials() bool { return m.username != "" || m.password != "" }

// Credentials are the user and password to AUTH with: the URL's, else
// SIDELOCK_REDIS_USERNAME and SIDELOCK_REDIS_PASSWORD (checkMasterSettings
// refuses a configuration that sets both).
func (m MasterAddr) Credentials(cfg Config) (username, password string) {
	if m.hasCredentials() {
		return m.username, m.password
	}
	return cfg.RedisUsername, cfg.RedisPassword
}

// masterForms is how every refusal describes what an entry may be.
const masterForms = "host:port or redis[s]://[user[:password]@]host:port " +
	"(the entry is not shown, as it may hold a password; characters such as @ : / ? # , ; in a password must be percent-encoded)"

// parseMasters parses one list of masters, refusing bad entries (by their
// position, never their text) and a master listed twice.
func parseMasters(entries []string) ([]MasterAddr, error) {
	masters := make([]MasterAddr, 0, len(entries))
	var errs []error
	for i, entry := range entries {
		m, err := parseMaster(entry)
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %d is not %s: %w", i+1, masterForms, err))
			continue
		}
		masters = append(masters, m)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if dup := firstDuplicate(masters); dup != "" {
		return nil, fmt.Errorf("master %s is listed twice: masters must be independent", dup)
	}
	return masters, nil
}

// parseMaster parses one entry. Its errors never hold any of the entry's
// text: the caller says which entry it was.
func parseMaster(entry string) (MasterAddr, error) {
	entry = strings.TrimSpace(entry)
	switch {
	case entry == "":
		return MasterAddr{}, errors.New("it is empty")
	case strings.Contains(entry, "://"):
		return parseMasterURL(entry)
	default:
		if err := checkHostPort(entry); err != nil {
			return MasterAddr{}, err
		}
		return MasterAddr{hostPort: entry}, nil
	}
}

// parseMasterURL parses redis://[user[:password]@]host:port[/0] and its
// rediss:// twin. net/url's own errors quote the URL, so none is passed on.
func parseMasterURL(entry string) (MasterAddr, error) {
	u, err := url.Parse(entry)
	switch {
	case err != nil:
		return MasterAddr{}, errors.New("it is not a valid URL")
	case u.Scheme != "redis" && u.Scheme != "rediss":
		return MasterAddr{}, errors.New("a URL must start with redis:// or rediss://")
	case u.Path != "" && u.Path != "/" && u.Path != "/0":
		// The lock keys, fence counters and member lists live in db 0,
		// where every sidecar sharing the masters must find them.
		return MasterAddr{}, errors.New("a URL may name database 0 only")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return MasterAddr{}, errors.New("a URL takes no query parameters or fragment")
	}
	if err := checkHostPort(u.Host); err != nil {
		return MasterAddr{}, err
	}
	password, _ := u.User.Password() // nil-safe
	return MasterAddr{hostPort: u.Host, scheme: u.Scheme, username: u.User.Username(), password: password}, nil
}

// dnsName is a host name as a resolver takes it: labels of letters, digits,
// '-' and '_' (service records) joined by dots. Anything else ('@', '/',
// spaces) means the entry is not what it looks like.
var dnsName = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})$`)

// checkHostPort accepts an IP address or a host name, and a port number.
func checkHostPort(hostPort string) error {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return errors.New("it does not split into a host and a port")
	}
	if _, ipErr := netip.ParseAddr(host); ipErr != nil && !dnsName.MatchString(host) {
		return errors.New("the host is not an IP address or a host name")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return errors.New("the port is not a number from 1 to 65535")
	}
	return nil
}

// firstDuplicate returns the first master listed twice, "" if none. Host
// names are case-insensitive, and a master written once as a URL and once
// as host:port is still one master.
func firstDuplicate(masters []MasterAddr) string {
	seen := make(map[string]bool, len(masters))
	for _, m := range masters {
		key := strings.ToLower(m.hostPort)
		if seen[key] {
			return m.hostPort
		}
		seen[key] = true
	}
	return ""
}

// checkMasterSettings refuses masters whose URLs contradict the other
// Redis settings:
//   - credentials both in a URL and in SIDELOCK_REDIS_USERNAME/PASSWORD: which
//     would apply to that master is a guess, and a wrong guess locks out
//     the sidecar at the first rotation of one of them;
//   - a scheme that disagrees with SIDELOCK_REDIS_TLS: every master is
//     dialled the same way (SIDELOCK_REDIS_TLS with its CA and client
//     certificate), so a rediss:// URL needs it on and a redis:// URL off,
//     rather than sidelock silently dropping or adding TLS.
//
// A master is named by its host:port only.
func (c Config) checkMasterSettings(masters []MasterAddr) []error {
	var errs []error
	envCredentials := c.RedisUsername != "" || c.RedisPassword != ""
	if m, ok := firstMaster(masters, MasterAddr.hasCredentials); ok && envCredentials {
		errs = append(errs, fmt.Errorf("master %s has credentials in its URL while SIDELOCK_REDIS_USERNAME or SIDELOCK_REDIS_PASSWORD is set: "+
			"give them in the URLs or in those settings, not both", m))
	}
	if m, ok := firstMaster(masters, isScheme("rediss")); ok && !c.RedisTLS {
		errs = append(errs, fmt.Errorf("master %s is a rediss:// URL but SIDELOCK_REDIS_TLS is false: set it to true (with its CA and client certificate settings)", m))
	}
	if m, ok := firstMaster(masters, isScheme("redis")); ok && c.RedisTLS {
		errs = append(errs, fmt.Errorf("master %s is a redis:// URL (no TLS) but SIDELOCK_REDIS_TLS is true: write rediss:// or host:port", m))
	}
	return errs
}

func isScheme(scheme string) func(MasterAddr) bool {
	return func(m MasterAddr) bool { return m.scheme == scheme }
}

func firstMaster(masters []MasterAddr, match func(MasterAddr) bool) (MasterAddr, bool) {
	for _, m := range masters {
		if match(m) {
			return m, true
		}
	}
	return MasterAddr{}, false
}

// HostPorts lists the masters' host:port.
func HostPorts(masters []MasterAddr) []string {
	out := make([]string, len(masters))
	for i, m := range masters {
		out[i] = m.hostPort
	}
	return out
}
