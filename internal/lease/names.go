package lease

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of the names and labels a request carries.
const (
	MaxOwnerLen = 128
	MaxNameLen  = 256
)

// ValidateName checks a lock name: 1–256 bytes of [A-Za-z0-9._:/-], with
// no empty, "." or ".." path segment (clients rewrite those in URLs, which
// would silently lock another name), and not ending in the segment
// "events", which names a lease's event stream.
func ValidateName(name string) error {
	if len(name) == 0 || len(name) > MaxNameLen {
		return fmt.Errorf("%w: lock name must be 1 to %d bytes", ErrInvalid, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%w: lock name may contain only A-Z a-z 0-9 . _ : / - (byte %d is %q)", ErrInvalid, i, name[i])
		}
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: lock name must not have an empty, \".\" or \"..\" segment", ErrInvalid)
		}
	}
	if name == reservedSegment || strings.HasSuffix(name, "/"+reservedSegment) {
		return fmt.Errorf("%w: a lock name may not end in the segment %q (GET /locks/{name}/events is the event stream)", ErrInvalid, reservedSegment)
	}
	return nil
}

// reservedSegment ends the path of a lease's event stream.
const reservedSegment = "events"

// nameByte is the alphabet of lock names (and, without ':', of the key
// prefix before its final ':', see keyprefix.go).
func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '/' || c == '-'
}

// ValidateOwner checks the free owner label: at most 128 bytes of printable
// UTF-8, since it is shown back to humans (in answers, logs and on the
// masters). Control characters and the invisible bidirectional controls
// (U+202E and kin, which make a label read differently from its bytes) are
// refused.
func ValidateOwner(owner string) error {
	if len(owner) > MaxOwnerLen {
		return fmt.Errorf("%w: owner must be at most %d bytes", ErrInvalid, MaxOwnerLen)
	}
	for _, r := range owner {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return fmt.Errorf("%w: owner must be printable UTF-8 without control or bidirectional-control characters (%U is not)", ErrInvalid, r)
		}
	}
	return nil
}
