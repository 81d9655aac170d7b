// Package cpupin pins the calling goroutine's thread to one CPU for a
// while: the benchmarks' load generators and the platform's probes, which
// must run away from (or on) a polling engine's CPU.
package cpupin

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Pin locks the calling goroutine to its thread and pins the thread to
// cpu; unpin restores the thread's affinity and unlocks it, on the same
// goroutine. The thread must outlive the pin: a thread that exits locked
// is ended by the runtime, and processes started from it later with
// Pdeathsig (the testbed's engines) would die with it, and those started
// while pinned would inherit the pin.
func Pin(cpu int) (unpin func(), err error) {
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("pinning to CPU %d: %w", cpu, err)
	}
	return func() {
		unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}, nil
}
