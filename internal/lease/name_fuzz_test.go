package lease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sidelock/sidelock/internal/lease"
)

// FuzzValidateName checks that every accepted name obeys the documented
// rules and that every rejection is ErrInvalid.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"orders/42", "a", "a//b", "../x", "x/.", "ü", strings.Repeat("a", 257), "a:b.c_d-e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := lease.ValidateName(name)
		if err != nil {
			if !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("rejection is not ErrInvalid: %v", err)
			}
			return
		}
		if len(name) < 1 || len(name) > 256 {
			t.Fatalf("accepted a name of %d bytes", len(name))
		}
		for _, seg := range strings.Split(name, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("accepted %q with segment %q", name, seg)
			}
		}
		if name == "events" || strings.HasSuffix(name, "/events") {
			t.Fatalf("accepted the reserved %q", name)
		}
		if strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/-") != "" {
			t.Fatalf("accepted %q with a byte outside the set", name)
		}
	})
}
