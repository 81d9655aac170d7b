package dpdk

/*
#include "onerma_dpdk.h"
*/
import "C"

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// RegisterThread registers the calling OS thread with the EAL
// (rte_thread_register) and returns the lcore id it was given, so per-lcore
// state such as mempool caches works for it.
//
// The caller must be a goroutine that called runtime.LockOSThread and never
// unlocks it afterwards: the lcore id is thread-local state of the OS
// thread. Call UnregisterThread before the goroutine ends, or let the
// goroutine exit locked (the runtime then ends the thread; the lcore id is
// not returned to the EAL).
//
// Pin the thread first (SetAffinity), then register: the EAL records the
// thread's CPU set and NUMA socket at registration.
func RegisterThread() (uint32, error) {
	r := C.onerma_thread_register()
	if r < 0 {
		return LcoreAny, fmt.Errorf("register thread: %w", newError("rte_thread_register", int(r)))
	}
	return uint32(r), nil
}

// UnregisterThread returns the calling thread's lcore id to the EAL
// (rte_thread_unregister). Same thread as RegisterThread.
func UnregisterThread() { C.onerma_thread_unregister() }

// SetAffinity pins the calling OS thread to the given CPUs
// (sched_setaffinity on the thread). Same locking rule as RegisterThread.
// Not DPDK-specific, but it belongs with thread registration.
func SetAffinity(cpus ...int) error {
	if len(cpus) == 0 {
		return fmt.Errorf("set affinity: %w", unix.EINVAL)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return fmt.Errorf("set affinity: cpu %d: %w", c, unix.EINVAL)
		}
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("set affinity %v: %w", cpus, err)
	}
	return nil
}

// Affinity returns the CPUs the calling OS thread may run on.
func Affinity() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("get affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
