package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SIDELOCK_LISTEN_ADDR takes a Unix socket as unix:// and an absolute,
// clean path that fits sun_path, in a directory that exists; any other
// form is refused at start-up with a message naming the setting.
func TestUnixSocketListenAddr(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	longest := "/" + strings.Repeat("d", MaxUnixSocketPath-1) // fits exactly; its directory is /
	for _, c := range []struct {
		addr, want string // want: "" accepted, else a part of the refusal
	}{
		{"unix://" + filepath.Join(dir, "api.sock"), ""},
		{"unix://" + longest, ""},
		{"unix://" + longest + "d", "beyond the 107"},
		{"unix://run/sidelock/api.sock", "not an absolute path"},
		{"unix://api.sock", "not an absolute path"},
		{"unix://", "not an absolute path"},
		{"unix:///", "not an absolute path"},
		{"unix:" + filepath.Join(dir, "api.sock"), "is written unix:// and an absolute path"},
		{"unix://" + dir + "/", "not a clean path"},
		{"unix://" + dir + "/../x/api.sock", "not a clean path"},
		{"unix://" + filepath.Join(dir, "missing", "api.sock"), "is the volume mounted there?"},
		{"unix://" + filepath.Join(file, "api.sock"), "is not a directory"},
		{"http://127.0.0.1:7420", "neither host:port nor unix://"},
	} {
		cfg := validConfig()
		cfg.ListenAddr = c.addr
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s refused: %v", c.addr, err)
		case c.want != "" && err == nil:
			t.Errorf("%s accepted", c.addr)
		case c.want != "" && (!strings.Contains(err.Error(), "SIDELOCK_LISTEN_ADDR") || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want a refusal naming SIDELOCK_LISTEN_ADDR and saying %q", c.addr, err, c.want)
		}
	}
}

// A Unix socket is reached through the filesystem only, so it needs no API
// token; a token that is set still passes validation with it.
func TestUnixSocketNeedsNoToken(t *testing.T) {
	cfg := validConfig()
	cfg.ListenAddr = "unix://" + filepath.Join(t.TempDir(), "api.sock")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("without a token: %v", err)
	}
	cfg.APIToken = "s3cret-api-token-0123456789"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with a token: %v", err)
	}
	if path, ok := cfg.UnixSocket(); !ok || path != strings.TrimPrefix(cfg.ListenAddr, "unix://") {
		t.Fatalf("UnixSocket() = %q, %v", path, ok)
	}
	if _, ok := validConfig().UnixSocket(); ok {
		t.Fatal("the default TCP address is taken for a socket")
	}
}
