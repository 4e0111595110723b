package sidecartest

import (
	"slices"
	"testing"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/redistest"
)

// The test timing: redistest.NodeTimeout, a tenth of a shorter key ttl,
// and nothing when the test chose its node timeout.
func TestEnvGivesTheMastersTimeSuitedToASharedMachine(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "SIDELOCK_NODE_TIMEOUT=" + redistest.NodeTimeout.String()},
		{[]string{"SIDELOCK_KEY_TTL=1s"}, "SIDELOCK_NODE_TIMEOUT=100ms"},
		{[]string{"SIDELOCK_KEY_TTL=1h"}, "SIDELOCK_NODE_TIMEOUT=" + redistest.NodeTimeout.String()},
		{[]string{"SIDELOCK_NODE_TIMEOUT=50ms", "SIDELOCK_KEY_TTL=1s"}, "SIDELOCK_KEY_TTL=1s"},
	} {
		if got := TestEnv(c.env); got[len(got)-1] != c.want || !slices.Equal(got[:len(c.env)], c.env) {
			t.Errorf("TestEnv(%q) = %q, want %q added", c.env, got, c.want)
		}
	}
}

// redistest.NodeTimeout is valid with the default key ttl, which a sidecar
// started without SIDELOCK_KEY_TTL has.
func TestNodeTimeoutFitsTheDefaultKeyTTL(t *testing.T) {
	c := config.Defaults()
	c.Dev, c.NodeTimeout = true, redistest.NodeTimeout
	if err := c.Validate(); err != nil {
		t.Fatalf("redistest.NodeTimeout %v with the default key ttl %v: %v", redistest.NodeTimeout, c.KeyTTL, err)
	}
}
