package dpdk

/*
#include "onerma_dpdk.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

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

// KeepOthersOff takes cpus out of the affinity of every other thread of
// the process (those that exist now; a thread started later inherits its
// creator's affinity, and Go starts threads from a thread that is not
// locked, so new runtime threads stay off too). A pinned polling thread
// calls it after SetAffinity, so that the runtime's other threads (woken
// by its syscalls and cgo calls), the control plane and DPDK's control
// threads do not take its CPU from it for a scheduler slice. A thread that
// may run only on cpus keeps its affinity. It returns how many threads it
// moved; a thread that exits meanwhile is skipped.
//
// It first fixes GOMAXPROCS at its current value: the runtime recounts
// the CPUs it may use from the affinity of whichever thread looks, and a
// moved thread has lost the pinned ones, so GOMAXPROCS would drop by as
// many a second later. The pinned loop holds one P for good; with none
// left for the rest, the runtime takes the loop's P away during a cgo call
// to run anything else, and the loop waits up to a preemption period
// (10 ms) to get it back.
func KeepOthersOff(cpus ...int) (int, error) {
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	self := unix.Gettid()
	dir, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("keep threads off %v: %w", cpus, err)
	}
	moved := 0
	for _, d := range dir {
		tid, err := strconv.Atoi(d.Name())
		if err != nil || tid == self {
			continue
		}
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // exited
		}
		changed := false
		for _, c := range cpus {
			if c >= 0 && c < len(set)*64 && set.IsSet(c) {
				set.Clear(c)
				changed = true
			}
		}
		if !changed || set.Count() == 0 {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			return moved, fmt.Errorf("keep thread %d off %v: %w", tid, cpus, err)
		}
		moved++
	}
	return moved, nil
}

// SetNice sets the nice value of the calling OS thread alone (Linux
// schedules threads, and setpriority on a thread id affects only it). Same
// locking rule as RegisterThread: the goroutine stays locked for good, so
// the runtime never hands the thread to other goroutines. A pinned polling
// thread at -20 weighs ~87 times a task at 0: a task the kernel places on
// its CPU gets short slices rarely, and load balancing moves it away,
// where at 0 the two would share the CPU in slices of milliseconds.
// Lowering the value needs CAP_SYS_NICE (or RLIMIT_NICE).
func SetNice(nice int) error {
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice); err != nil {
		return fmt.Errorf("set nice %d: %w", nice, err)
	}
	return nil
}

// Nice returns the nice value of the calling OS thread.
func Nice() (int, error) {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		return 0, fmt.Errorf("get nice: %w", err)
	}
	return 20 - p, nil // the system call answers 20 - nice, never negative
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
