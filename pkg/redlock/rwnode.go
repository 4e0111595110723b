package redlock

import (
	"context"
	"time"
)

// RWNode is implemented by nodes that keep read/write locks; both shipped
// nodes do, and a Locker's AcquireReader and AcquireWriter require it of
// every node.
//
// A read/write lock is, on one master, a writer key, a fixed set of
// reader keys (one per reader: readers hold "slots", as a semaphore's
// holders do) and an intent key. All of them are ordinary keys: a holder
// extends and releases its key with Extend and Release. Only the two
// acquisitions below differ from Acquire, and each is atomic on the
// master:
//
//   - a reader is admitted only while no writer holds the writer key and
//     no writer has declared its intent;
//   - a writer is admitted only while no other writer and no reader holds
//     the master; refused, it declares its intent so that no new reader is
//     admitted on that master while it waits (writers do not starve).
//
// A renewal that finds a key missing on a master puts it back there
// (Locker.Extend); a read/write lock's key must then not land beside the
// other side's, which GuardedRepairer checks as the acquisitions do.
type RWNode interface {
	// AcquireReader is Acquire of a reader's key that is refused, with
	// nothing written, while writerKey or intentKey is held by any value;
	// holderTTL is then that key's remaining ttl. A reader that already
	// holds key has it refreshed whatever the other keys hold (a retried
	// call is idempotent, and a reader already in may stay). keyTaken
	// tells a refusal only because another reader holds key (no writer
	// holds or waits there) from one by a writer.
	AcquireReader(ctx context.Context, key, value string, ttl time.Duration, writerKey, intentKey string) (acquired bool, holderTTL time.Duration, keyTaken bool, err error)

	// AcquireWriter is Fencer.AcquireFenced of writerKey that is also
	// refused while any of readerKeys is held by any value. Refused, it
	// sets intentKey to value with ttl (overwriting any other writer's
	// intent: one intent per master is enough to bar new readers) and
	// returns the longest remaining ttl of what refused it. Granted, it
	// deletes intentKey if it holds value.
	AcquireWriter(ctx context.Context, writerKey, fenceKey, value string, ttl time.Duration, intentKey string, readerKeys []string) (acquired bool, holderTTL time.Duration, floor int64, err error)
}

// GuardedRepairer is implemented by nodes that can put a key back only
// while none of other keys is held: how a renewal repairs a read/write
// lock's key (Config.Excluders), a reader's beside no writer and a writer's
// beside no reader. Both shipped nodes implement it.
type GuardedRepairer interface {
	// PutBack is Acquire of key for value with ttl (set if absent, the
	// ttl refreshed if value holds it already), refused with nothing
	// written while any of excluders holds any value; it reports whether
	// value holds key afterwards.
	PutBack(ctx context.Context, key, value string, ttl time.Duration, excluders []string) (bool, error)
}
