package tsc

// Read returns the time-stamp counter (RDTSC, not serialising: a read
// may pass neighbouring instructions by a few dozen cycles, which a sum
// over millions of reads does not see).
//
//go:noescape
func Read() uint64

// Native reports whether Read is the CPU's counter (true) or the
// monotonic clock in nanoseconds (the portable fallback).
const Native = true
