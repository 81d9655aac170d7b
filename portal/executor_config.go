package portal

import (
	"fmt"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/cc"
)

// ExecutorConfig tunes an Executor. Zero values take the defaults of
// DefaultExecutorConfig.
type ExecutorConfig struct {
	// CC are the congestion control parameters (paper §6). The
	// zero value means cc.DefaultParams(); to change some, start from
	// DefaultExecutorConfig() (or cc.DefaultParams()).
	CC cc.Params
	// Slots is how many command slots the executor uses: it takes the
	// portal's free slots first and asks the engine (AllocSlots) for the
	// rest. 0: every slot free in the portal at NewExecutor, or, if none
	// is, DefaultExecutorSlots (capped by the application's slot cap).
	Slots int
	// ChunkBytes is the size transfers are split into (1..MaxOpBytes;
	// default MaxOpBytes).
	ChunkBytes int
	// BackoffBase and BackoffMax bound the backoff before a chunk that
	// completed NACK or DISPATCH_TIMEOUT is posted again: the k-th such
	// completion of one chunk waits min(BackoffBase·2^(k-1), BackoffMax),
	// jittered uniformly over its upper half (defaults 20 µs and 1 ms).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// TimeoutRetries is how many times a chunk that completed TIMEOUT is
	// posted again before the transfer fails (default 16; negative: never).
	// The retry is immediate, subject to the congestion window, which the
	// TIMEOUT has cut.
	TimeoutRetries int
	// MaxAttempts bounds how many times one chunk is posted, whatever the
	// statuses (default 10000; negative: no bound, only the context ends
	// a transfer that is NACKed for ever).
	MaxAttempts int
	// SpinWait: the driver spins rather than sleeps for a pacing or backoff
	// wait shorter than this (default 50 µs, about the kernel's timer
	// slack).
	SpinWait time.Duration
	// ShortFirst gives short transfers precedence over long ones (paper
	// §7.2, Fig. 12): while a transfer of at most one chunk is in progress,
	// or finished less than ShortHold ago, transfers of more than one
	// chunk keep at most ShortFirst ops in flight in all, so a short op
	// queues behind at most that many chunks in the engines instead of
	// behind the whole congestion window (default 4; negative: no
	// precedence, short and long transfers share the window round-robin).
	ShortFirst int
	// ShortHold keeps the long transfers capped for a while after a
	// short transfer finished, so an application that issues short ops
	// back to back does not find a full window in front of each (default
	// 50 µs).
	ShortHold time.Duration
	// ShortHoldMax: the hold follows how often short transfers start, at
	// least ShortHold and at most ShortHoldMax: shortHoldGaps times the
	// mean gap between their starts (an exponentially weighted average),
	// so short transfers arriving at random (Poisson) find the long ones
	// capped rather than a full window in front of them, which they would
	// wait for (default 1 ms; at most ShortHold: the hold is ShortHold).
	ShortHoldMax time.Duration
}

// Executor defaults.
const (
	DefaultExecutorSlots  = 64
	DefaultTimeoutRetries = 16
	DefaultMaxAttempts    = 10000
	DefaultBackoffBase    = 20 * time.Microsecond
	DefaultBackoffMax     = time.Millisecond
	DefaultSpinWait       = 50 * time.Microsecond
	DefaultShortFirst     = 4
	DefaultShortHold      = 50 * time.Microsecond
	DefaultShortHoldMax   = time.Millisecond
)

// DefaultExecutorConfig returns the defaults, every field filled in.
func DefaultExecutorConfig() ExecutorConfig {
	return ExecutorConfig{
		CC:             cc.DefaultParams(),
		ChunkBytes:     abi.MaxOpBytes,
		BackoffBase:    DefaultBackoffBase,
		BackoffMax:     DefaultBackoffMax,
		TimeoutRetries: DefaultTimeoutRetries,
		MaxAttempts:    DefaultMaxAttempts,
		SpinWait:       DefaultSpinWait,
		ShortFirst:     DefaultShortFirst,
		ShortHold:      DefaultShortHold,
		ShortHoldMax:   DefaultShortHoldMax,
	}
}

// withDefaults fills zero fields in.
func (c ExecutorConfig) withDefaults() ExecutorConfig {
	d := DefaultExecutorConfig()
	if c.CC == (cc.Params{}) {
		c.CC = d.CC
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = d.ChunkBytes
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = d.BackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(d.BackoffMax, c.BackoffBase)
	}
	switch {
	case c.TimeoutRetries == 0:
		c.TimeoutRetries = d.TimeoutRetries
	case c.TimeoutRetries < 0:
		c.TimeoutRetries = 0
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.SpinWait == 0 {
		c.SpinWait = d.SpinWait
	}
	if c.ShortFirst == 0 {
		c.ShortFirst = d.ShortFirst
	}
	if c.ShortHold == 0 {
		c.ShortHold = d.ShortHold
	}
	if c.ShortHoldMax == 0 {
		c.ShortHoldMax = d.ShortHoldMax
	}
	return c
}

// Validate reports the first field that makes no sense (after defaults
// are applied: NewExecutor validates what it will use).
func (c *ExecutorConfig) Validate() error {
	if err := c.CC.Validate(); err != nil {
		return fmt.Errorf("portal: executor config: %w", err)
	}
	bad := func(name string, v any, why string) error {
		return fmt.Errorf("portal: executor config: %s = %v: %s", name, v, why)
	}
	switch {
	case c.Slots < 0 || c.Slots > 1<<20:
		return bad("Slots", c.Slots, "want 0..2^20")
	case c.ChunkBytes < 1 || c.ChunkBytes > abi.MaxOpBytes:
		return bad("ChunkBytes", c.ChunkBytes, fmt.Sprintf("want 1..%d", abi.MaxOpBytes))
	case c.BackoffBase < 0:
		return bad("BackoffBase", c.BackoffBase, "must be >= 0")
	case c.BackoffMax < c.BackoffBase:
		return bad("BackoffMax", c.BackoffMax, "must be >= BackoffBase")
	case c.BackoffMax > time.Minute:
		return bad("BackoffMax", c.BackoffMax, "must be <= 1m")
	case c.TimeoutRetries > 1<<20:
		return bad("TimeoutRetries", c.TimeoutRetries, "want <= 2^20")
	case c.SpinWait < 0 || c.SpinWait > time.Second:
		return bad("SpinWait", c.SpinWait, "want 0..1s")
	case c.ShortFirst > 1<<20:
		return bad("ShortFirst", c.ShortFirst, "want <= 2^20")
	case c.ShortHold < 0 || c.ShortHold > time.Second:
		return bad("ShortHold", c.ShortHold, "want 0..1s")
	case c.ShortHoldMax < 0 || c.ShortHoldMax > time.Second:
		return bad("ShortHoldMax", c.ShortHoldMax, "want 0..1s")
	}
	return nil
}
