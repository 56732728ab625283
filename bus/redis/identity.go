package redis

import (
	"bufio"
	"context"
	"fmt"
	"strings"
)

// Identity implements instanceai.BusIdentifier: the Redis server's run_id
// (the same on every instance however they reach it) and the channel.
// Pub/sub channels are global to a server, so the DB number does not
// matter.
func (b *Bus) Identity(ctx context.Context) (string, error) {
	info, err := b.pub.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis bus: INFO server: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if id, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "run_id:"); ok {
			return fmt.Sprintf("redis (server run_id %s) channel %s", id, b.channel), nil
		}
	}
	return "", fmt.Errorf("redis bus: INFO server has no run_id")
}
