package main

// The platform setup measures two facts of the host that bound OneRMA's
// latencies, whatever the engines do. The target "unloaded 64 B READ over
// memif p50 <= 10 µs" needs an application, a client engine and a serving
// engine: three busy threads in three processes on two CPUs, so at least
// two cross-process switches per op, and xproc-wake's round trip is the
// floor of that. And a busy engine loses its CPU whenever the hypervisor
// takes it: p99 latency under load includes cpu-stall's stalls.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/cpupin"
	"golang.org/x/sys/unix"
)

// childEnv names the hidden role this binary runs in when re-executed by
// xprocWake.
const childEnv = "ONERMA_RMABENCH_CHILD"

// platformCap caps each platform measurement (-D may be minutes).
const platformCap = 3 * time.Second

// stallMin is the smallest gap between two clock reads counted as a stall.
const stallMin = 2 * time.Microsecond

// platformRun measures cpu-stall and xproc-wake.
func platformRun(dur time.Duration, emit emitFunc) error {
	dur = min(dur, platformCap)
	s, err := cpuStall(dur)
	if err != nil {
		return err
	}
	emit(s)
	w, err := xprocWake(dur)
	if err != nil {
		return err
	}
	emit(w)
	return nil
}

// cpuStall spins on CPU 1 reading the monotonic clock for dur: every gap
// between two consecutive reads above stallMin is time the thread did not
// run (on an idle VM: the hypervisor's interrupts, the guest's timer tick
// among them; bench/RESULTS.md, platform).
func cpuStall(dur time.Duration) (Row, error) {
	unpin, err := cpupin.Pin(1)
	if err != nil {
		return Row{}, err
	}
	defer unpin()
	var gaps []float64 // µs
	var lost time.Duration
	start := time.Now()
	prev := time.Since(start)
	for prev < dur {
		now := time.Since(start)
		if g := now - prev; g > stallMin {
			gaps = append(gaps, float64(g)/1e3)
			lost += g
		}
		prev = now
	}
	secs := prev.Seconds()
	r := Row{System: "host", Setup: "platform", Test: "cpu-stall", Outstanding: 1, Cores: 1,
		OpsPerSec: float64(len(gaps)) / secs, Ops: uint64(len(gaps)), Seconds: secs,
		Command: fmt.Sprintf("rmabench (one thread pinned to CPU 1 reads the monotonic clock for %v; a gap > %v between reads is a stall)", dur, stallMin)}
	r.P50us, r.P99us, r.P999us = pcts(gaps)
	r.Note = fmt.Sprintf("stalls of a busy thread on CPU 1 (ops/s: stalls per second; p50/p99/p99.9: stall length): %.2f %% of the time lost; a busy engine loses the same, and p99 latency under load includes them",
		100*lost.Seconds()/secs)
	return r, nil
}

// The shared page of xprocWake: each word on its own cache line.
const (
	offReq   = 0   // request number, written by the parent
	offResp  = 64  // request number answered, written by the child
	offArmed = 128 // 1: the parent sleeps (or is about to) on the eventfd
	offReady = 192 // 1: the child is pinned and polling
)

// childLimit is how long an xproc child polls at most, should its parent
// neither kill it nor die (Pdeathsig).
const childLimit = platformCap + 10*time.Second

func word(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }

// xprocWake measures the round trip between two processes on CPU 0: this
// one sleeping on an eventfd as an application sleeps on its portal's
// completion doorbell, and a child of it (this binary re-executed, running
// xprocChild) busy-polling a shared page as an engine polls its rings.
func xprocWake(dur time.Duration) (Row, error) {
	unpin, err := cpupin.Pin(0)
	if err != nil {
		return Row{}, err
	}
	defer unpin()
	memfd, err := unix.MemfdCreate("rmabench-xproc", unix.MFD_CLOEXEC)
	if err != nil {
		return Row{}, err
	}
	memf := os.NewFile(uintptr(memfd), "memfd")
	defer memf.Close()
	if err := unix.Ftruncate(memfd, 4096); err != nil {
		return Row{}, err
	}
	mem, err := unix.Mmap(memfd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return Row{}, err
	}
	defer unix.Munmap(mem)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC) // blocking reads
	if err != nil {
		return Row{}, err
	}
	evf := os.NewFile(uintptr(efd), "eventfd")
	defer evf.Close()

	self, err := os.Executable()
	if err != nil {
		return Row{}, err
	}
	child := exec.Command(self)
	child.Env = append(os.Environ(), childEnv+"=xproc")
	child.ExtraFiles = []*os.File{memf, evf} // fds 3 and 4
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := child.Start(); err != nil {
		return Row{}, err
	}
	// If the child exits, wake the parent should it sleep on the eventfd.
	var dead atomic.Bool
	exited := make(chan struct{})
	go func() {
		child.Wait()
		dead.Store(true)
		unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		close(exited)
	}()
	defer func() { child.Process.Kill(); <-exited }()

	req, resp, armed, ready := word(mem, offReq), word(mem, offResp), word(mem, offArmed), word(mem, offReady)
	for t := time.Now(); atomic.LoadUint64(ready) == 0; time.Sleep(time.Millisecond) {
		if dead.Load() || time.Since(t) > 10*time.Second {
			return Row{}, errors.New("xproc-wake: the child did not start")
		}
	}
	const warmup = 1000
	var lat []float64 // µs
	var buf [8]byte
	start := time.Now()
	for i := uint64(1); ; i++ {
		t0 := time.Now()
		if i == warmup+1 {
			start = t0
		} else if i > warmup && t0.Sub(start) >= dur {
			break
		}
		atomic.StoreUint64(req, i)
		for atomic.LoadUint64(resp) != i {
			atomic.StoreUint64(armed, 1)
			if atomic.LoadUint64(resp) == i {
				atomic.StoreUint64(armed, 0)
				break
			}
			if _, err := unix.Read(efd, buf[:]); err != nil && err != unix.EINTR {
				return Row{}, fmt.Errorf("xproc-wake: reading the eventfd: %v", err)
			}
			if dead.Load() {
				return Row{}, errors.New("xproc-wake: the child exited")
			}
		}
		if i > warmup {
			lat = append(lat, float64(time.Since(t0))/1e3)
		}
	}
	secs := time.Since(start).Seconds()
	r := Row{System: "host", Setup: "platform", Test: "xproc-wake", Size: 8, Outstanding: 1, Cores: 1,
		OpsPerSec: float64(len(lat)) / secs, Ops: uint64(len(lat)), Seconds: secs,
		Command: "rmabench (parent: store a request in a shared memfd page, sleep on an eventfd; child process: busy-poll the page, answer, write the eventfd if armed; both pinned to CPU 0)",
		Note:    "round trip between a process sleeping on an eventfd doorbell and a busy-polling process on the same CPU (two cross-process switches, no work): the floor of an op whose application and engine share a CPU"}
	r.P50us, r.P99us, r.P999us = pcts(lat)
	return r, nil
}

// xprocChild is the busy-polling end of xprocWake: it answers every new
// request in the shared page (fd 3) and rings the eventfd (fd 4) when the
// parent armed it.
func xprocChild() error {
	if _, err := cpupin.Pin(0); err != nil {
		return err
	}
	mem, err := unix.Mmap(3, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("xproc child: mapping the shared page (fd 3): %w", err)
	}
	req, resp, armed := word(mem, offReq), word(mem, offResp), word(mem, offArmed)
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	atomic.StoreUint64(word(mem, offReady), 1)
	start, last := time.Now(), uint64(0)
	for n := 0; ; n++ {
		if v := atomic.LoadUint64(req); v != last {
			last = v
			atomic.StoreUint64(resp, v)
			if atomic.SwapUint64(armed, 0) == 1 {
				if _, err := unix.Write(4, one); err != nil {
					return err
				}
			}
		}
		if n%4096 == 0 && time.Since(start) > childLimit {
			return errors.New("xproc child: still running after " + childLimit.String())
		}
	}
}

// pcts returns the p50, p99 and p99.9 of v (sorted in place; nearest rank).
func pcts(v []float64) (p50 float64, p99, p999 *float64) {
	if len(v) == 0 {
		return 0, benchrow.F(0), benchrow.F(0)
	}
	slices.Sort(v)
	at := func(q float64) float64 { return v[min(len(v)-1, int(q*float64(len(v))))] }
	return at(0.50), benchrow.F(at(0.99)), benchrow.F(at(0.999))
}
