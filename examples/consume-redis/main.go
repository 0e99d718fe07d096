// Command consume-redis applies the order events from a Redis stream,
// read with go-redis through a consumer group, to its own database, each
// exactly once (examples/shop, outboxconsumer):
//
//	consume-redis -url redis://127.0.0.1:6379/0 -stream outbox:ORDER -mode dedupe
//
// An entry is acknowledged (XACK) only after it was applied. (The Redis of
// -mode redis, the pre-filter, may be the same server: -redis.)
package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-cdc/outbox-cdc/examples/shop"
	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
)

func main() {
	var f shop.ConsumerFlags
	f.Register(flag.CommandLine)
	url := flag.String("url", "redis://127.0.0.1:6379/0", "Redis URL of the stream")
	stream := flag.String("stream", "outbox:ORDER", "the stream key (the relay's rendered route.topic)")
	flag.Parse()
	f.Run(func(ctx context.Context, handle func(outboxconsumer.Message) error) error {
		opt, err := redis.ParseURL(*url)
		if err != nil {
			return err
		}
		rc := redis.NewClient(opt)
		defer rc.Close()
		// The group reads the stream from its start; BUSYGROUP: it exists.
		if err := rc.XGroupCreateMkStream(ctx, *stream, f.Name, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return err
		}
		// First what this consumer read before but did not acknowledge
		// (it stopped in between), then new entries.
		for _, from := range []string{"0", ">"} {
			for ctx.Err() == nil {
				res, err := rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: f.Name, Consumer: f.Name,
					Streams: []string{*stream, from}, Count: 100, Block: 500 * time.Millisecond}).Result()
				if errors.Is(err, redis.Nil) {
					if from == "0" {
						break
					}
					continue
				}
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				n := 0
				for _, s := range res {
					for _, x := range s.Messages {
						n++
						m, err := outboxconsumer.FromRedisStream(x.Values, shop.Fields())
						if err == nil {
							err = handle(m)
						}
						if err != nil {
							return err
						}
						if err := rc.XAck(ctx, *stream, f.Name, x.ID).Err(); err != nil {
							return err
						}
					}
				}
				if from == "0" && n == 0 {
					break
				}
			}
		}
		return nil
	})
}
