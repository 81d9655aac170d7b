//go:build !amd64

package tsc

import "time"

var epoch = time.Now()

// Read returns nanoseconds on the monotonic clock: the portable fallback
// where no counter instruction is wired (Native is false, Hz 1e9).
func Read() uint64 { return uint64(time.Since(epoch)) }

// Native reports whether Read is the CPU's counter (true) or the
// monotonic clock in nanoseconds (the portable fallback).
const Native = false
