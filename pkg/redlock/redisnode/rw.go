package redisnode

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
)

var (
	//go:embed acquire_reader.lua
	acquireReaderSrc string
	//go:embed acquire_writer.lua
	acquireWriterSrc string
	//go:embed put_back.lua
	putBackSrc string

	acquireReaderScript = redis.NewScript(acquireReaderSrc)
	acquireWriterScript = redis.NewScript(fenceFloorSrc + acquireWriterSrc)
	putBackScript       = redis.NewScript(takeKeySrc + putBackSrc)
)

var (
	_ redlock.RWNode          = (*Node)(nil)
	_ redlock.GuardedRepairer = (*Node)(nil)
)

// PutBack implements redlock.GuardedRepairer.
func (n *Node) PutBack(ctx context.Context, key, value string, ttl time.Duration, excluders []string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, n.wrap(ctx, "put back", err)
	}
	reply, err := n.pipe.run(ctx, putBackScript, append([]string{key}, excluders...), value, milliseconds(ttl)).Int64()
	if err != nil {
		return false, n.wrap(ctx, "put back", err)
	}
	return reply == 1, nil
}

// AcquireReader implements redlock.RWNode.
func (n *Node) AcquireReader(ctx context.Context, key, value string, ttl time.Duration, writerKey, intentKey string) (bool, time.Duration, bool, error) {
	if err := ctx.Err(); err != nil {
		return false, 0, false, n.wrap(ctx, "acquire reader", err)
	}
	keys := []string{key, writerKey, intentKey}
	reply, err := n.pipe.run(ctx, acquireReaderScript, keys, value, milliseconds(ttl)).Int64Slice()
	if err != nil {
		return false, 0, false, n.wrap(ctx, "acquire reader", err)
	}
	if len(reply) != 3 {
		return false, 0, false, n.wrap(ctx, "acquire reader", fmt.Errorf("unexpected script reply %v", reply))
	}
	if reply[0] == 1 {
		return true, 0, false, nil
	}
	return false, time.Duration(reply[1]) * time.Millisecond, reply[2] == 1, nil
}

// AcquireWriter implements redlock.RWNode.
func (n *Node) AcquireWriter(ctx context.Context, writerKey, fenceKey, value string, ttl time.Duration, intentKey string, readerKeys []string) (bool, time.Duration, int64, error) {
	if err := ctx.Err(); err != nil {
		return false, 0, 0, n.wrap(ctx, "acquire writer", err)
	}
	keys := append([]string{writerKey, fenceKey, intentKey}, readerKeys...)
	reply, err := n.pipe.run(ctx, acquireWriterScript, keys, value, milliseconds(ttl)).Int64Slice()
	if err != nil {
		return false, 0, 0, n.wrap(ctx, "acquire writer", err)
	}
	if len(reply) != 3 {
		return false, 0, 0, n.wrap(ctx, "acquire writer", fmt.Errorf("unexpected script reply %v", reply))
	}
	if reply[0] == 1 {
		return true, 0, reply[2], nil
	}
	return false, time.Duration(reply[1]) * time.Millisecond, 0, nil
}
