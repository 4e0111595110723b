package redisnode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
)

var _ redlock.ServerInfoReader = (*Node)(nil)

// ServerInfo reads the master's identity, role and persistence settings in
// one round trip, bounded by ctx: INFO server (run_id, uptime_in_seconds),
// INFO replication (role), CONFIG GET appendonly and CONFIG GET appendfsync.
// Two INFO sections and two CONFIG GETs rather than one call each, because
// several arguments to either need Redis 7.
//
// When CONFIG is refused by the server (renamed away, or denied by an ACL)
// the result has PersistenceKnown false; that is not an error. Managed
// Redis services commonly disable CONFIG but allow INFO.
//
// Uptime is a lower bound: Redis counts whole seconds from a start time
// truncated to the second, so its figure can exceed the true uptime by
// almost a second. One second is taken off (never below zero), so that a
// restart probation measured from it never ends early.
func (n *Node) ServerInfo(ctx context.Context) (redlock.ServerInfo, error) {
	if err := ctx.Err(); err != nil {
		return redlock.ServerInfo{}, n.wrap(ctx, "info", err)
	}
	var server, replication *redis.StringCmd
	var appendOnly, appendFsync *redis.MapStringStringCmd
	// Each command's own error is inspected below; the pipeline's first
	// error adds nothing.
	_, _ = n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		server = p.Info(ctx, "server")
		replication = p.Info(ctx, "replication")
		appendOnly = p.ConfigGet(ctx, "appendonly")
		appendFsync = p.ConfigGet(ctx, "appendfsync")
		return nil
	})
	info, err := parseInfo(server, replication)
	if err != nil {
		return redlock.ServerInfo{}, n.wrap(ctx, "info", err)
	}
	if err := readPersistence(&info, appendOnly, appendFsync); err != nil {
		return redlock.ServerInfo{}, n.wrap(ctx, "config get", err)
	}
	return info, nil
}

// parseInfo reads run_id, uptime and role from the two INFO replies.
func parseInfo(server, replication *redis.StringCmd) (redlock.ServerInfo, error) {
	if err := cmp.Or(server.Err(), replication.Err()); err != nil {
		return redlock.ServerInfo{}, err
	}
	fields := infoFields(server.Val() + replication.Val())
	seconds, err := strconv.ParseInt(fields["uptime_in_seconds"], 10, 64)
	if err != nil || fields["run_id"] == "" || fields["role"] == "" {
		return redlock.ServerInfo{}, fmt.Errorf("INFO lacks run_id, uptime_in_seconds or role: %q", fields)
	}
	return redlock.ServerInfo{
		RunID:  fields["run_id"],
		Uptime: time.Duration(max(seconds-1, 0)) * time.Second,
		Role:   fields["role"],
	}, nil
}

// infoFields splits INFO's "key:value" lines; "# Section" headers and blank
// lines are skipped.
func infoFields(text string) map[string]string {
	fields := make(map[string]string)
	for line := range strings.Lines(text) {
		key, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(key, "#") {
			fields[key] = value
		}
	}
	return fields
}

// readPersistence fills in the append-only settings. A refusal by the
// server leaves PersistenceKnown false; any other failure (a timeout, a
// broken connection) is returned, since it says nothing about the settings.
func readPersistence(info *redlock.ServerInfo, appendOnly, appendFsync *redis.MapStringStringCmd) error {
	refused := false
	for _, err := range []error{appendOnly.Err(), appendFsync.Err()} {
		var reply redis.Error
		switch {
		case err == nil:
		case errors.As(err, &reply):
			refused = true
		default:
			return err
		}
	}
	aof, ok1 := appendOnly.Val()["appendonly"]
	fsync, ok2 := appendFsync.Val()["appendfsync"]
	if refused || !ok1 || !ok2 {
		return nil // unknown: a server may also hide the settings
	}
	info.PersistenceKnown, info.AppendOnly, info.AppendFsync = true, aof == "yes", fsync
	return nil
}
