package lease_test

import (
	"strings"
	"testing"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/pkg/redlock"
)

func TestValidateKeyPrefix(t *testing.T) {
	for _, ok := range []string{"sidelock:", "t:", "team-a:", "orders.v2/eu_1:", strings.Repeat("a", lease.MaxKeyPrefixLen-1) + ":"} {
		if err := lease.ValidateKeyPrefix(ok); err != nil {
			t.Errorf("ValidateKeyPrefix(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", ":", "sidelock", "sidelock:victim#", "a#b:", "a:b:", "a b:", "é:", "a\x00:", strings.Repeat("a", lease.MaxKeyPrefixLen) + ":"} {
		if err := lease.ValidateKeyPrefix(bad); err == nil {
			t.Errorf("ValidateKeyPrefix(%q) = nil, want an error", bad)
		}
	}
}

// TestKeyPrefixesCannotCollide: for any two valid prefixes and valid names,
// the lock keys and fence keys of one never equal a key of the other unless
// prefix and name are the same (the issue-14 attack was prefix
// "sidelock:victim#" locking "fence", which wrote victim's fence counter).
func TestKeyPrefixesCannotCollide(t *testing.T) {
	prefixes := []string{"sidelock:", "sidelock:victim#", "sidelock:victim:", "side:", "s:", "sidelock/a:", "sidelockv:"}
	names := []string{"victim", "fence", "victim#fence", "a", "lock:victim", "victim/fence", "v:fence", "a/victim"}
	type owner struct{ prefix, name string }
	seen := map[string]owner{}
	for _, p := range prefixes {
		if lease.ValidateKeyPrefix(p) != nil {
			continue
		}
		for _, n := range names {
			if lease.ValidateName(n) != nil {
				continue
			}
			for _, k := range []string{p + n, redlock.FenceKey(p + n)} {
				if o, dup := seen[k]; dup && o != (owner{p, n}) {
					t.Errorf("key %q belongs to both %v and %v", k, o, owner{p, n})
				}
				seen[k] = owner{p, n}
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no keys checked")
	}
}
