package kvload

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Redis is a Store of a Redis server through go-redis, over one TCP
// connection of its own (a pool of one).
type Redis struct {
	c   *redis.Client
	ctx context.Context
}

var _ Loader = (*Redis)(nil)

// DialRedis returns a Dialer of Redis at addr (host:port). Its clients
// speak RESP2, skip CLIENT SETINFO and cluster maintenance notifications
// on connecting (nothing the measured commands need), and hold one
// connection each.
func DialRedis(addr string) Dialer {
	return func() (Store, error) {
		c := redis.NewClient(&redis.Options{
			Addr: addr, Protocol: 2, DisableIdentity: true,
			PoolSize: 1, MinIdleConns: 1,
			DialTimeout: clientTimeout, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		ctx := context.Background()
		if err := c.Ping(ctx).Err(); err != nil {
			c.Close()
			return nil, fmt.Errorf("redis %s: %w", addr, err)
		}
		return &Redis{c: c, ctx: ctx}, nil
	}
}

// Get implements Store.
func (r *Redis) Get(key, dst []byte) ([]byte, error) {
	v, err := r.c.Get(r.ctx, string(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return append(dst[:0], v...), nil
}

// Set implements Store.
func (r *Redis) Set(key, value []byte) error {
	return r.c.Set(r.ctx, string(key), value, 0).Err()
}

// SetMany implements Loader: the SETs in one pipeline.
func (r *Redis) SetMany(keys, values [][]byte) error {
	p := r.c.Pipeline()
	for i, k := range keys {
		p.Set(r.ctx, string(k), values[i], 0)
	}
	_, err := p.Exec(r.ctx)
	return err
}

// Close implements Store.
func (r *Redis) Close() error { return r.c.Close() }
