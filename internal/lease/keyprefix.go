package lease

import (
	"fmt"
	"strings"
)

// MaxKeyPrefixLen bounds SIDELOCK_KEY_PREFIX: every key on the masters
// carries it.
const MaxKeyPrefixLen = 64

// ValidateKeyPrefix checks the namespace of the keys on the masters:
// 1–64 bytes of A-Z a-z 0-9 . _ / - ending in the one ':' it may contain.
//
// Keys are the prefix followed by the lock name, and the masters also hold
// keys derived from them ("<key>#fence", "<prefix>#group#<group>"). Because
// the prefix ends at its only ':' and holds no '#', a key splits into
// prefix and name in exactly one way, so two sidecars with different
// prefixes on the same masters can never write each other's lock, fence
// counter or membership keys, whatever names they lock.
func ValidateKeyPrefix(prefix string) error {
	const rule = "must be 1 to %d bytes of A-Z a-z 0-9 . _ / - ending in one ':' (such as \"sidelock:\" or \"team-a:\"), " +
		"so that no two prefixes' keys can collide"
	if len(prefix) < 2 || len(prefix) > MaxKeyPrefixLen || !strings.HasSuffix(prefix, ":") {
		return fmt.Errorf(rule, MaxKeyPrefixLen)
	}
	for i := 0; i < len(prefix)-1; i++ {
		if c := prefix[i]; c == ':' || !nameByte(c) {
			return fmt.Errorf(rule+" (byte %d is not)", MaxKeyPrefixLen, i)
		}
	}
	return nil
}
