package dpdk

/*
#cgo pkg-config: libdpdk
#cgo LDFLAGS: -lrte_net_ring
#cgo CFLAGS: -O3 -Wall -Wno-deprecated-declarations
#include <stdlib.h>
#include "onerma_dpdk.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"
)

// LcoreAny is the lcore id of a thread the EAL does not know
// (LCORE_ID_ANY).
const LcoreAny = ^uint32(0)

// SocketAny lets DPDK choose the NUMA socket (SOCKET_ID_ANY).
const SocketAny = -1

// MaxLcore is RTE_MAX_LCORE of the linked DPDK build.
const MaxLcore = C.ONERMA_MAX_LCORE

var eal struct {
	mu    sync.Mutex
	state ealState
	err   error       // why the first Init failed (state ealFailed)
	calls chan func() // run on the main lcore thread
}

type ealState int

const (
	ealNone ealState = iota
	ealReady
	ealFailed
	ealCleanedUp
)

// Init initialises the EAL (rte_eal_init) with args, the command line
// without the program name (which Init supplies), e.g.
//
//	dpdk.Init([]string{"--no-pci", "--in-memory",
//		"--lcores=0@(0-1)", "--vdev=net_ring0"})
//
// rte_eal_init pins the thread that calls it and keeps per-thread state for
// the main lcore, so Init runs it on a dedicated goroutine locked to a fresh
// OS thread that stays parked, locked, for the life of the EAL: the pinning
// never leaks to other goroutines, and Cleanup runs on the same thread.
// (The Go runtime starts new threads from a template thread when the
// current one is locked, so no thread inherits the EAL's affinity.)
//
// The EAL can be initialised once per process: a second call returns
// ErrAlreadyInitialized, and a call after a failed one returns the first
// failure again (rte_eal_init cannot be retried). The C copies of args are
// kept for the life of the process, as the EAL may point into them.
func Init(args []string) error {
	eal.mu.Lock()
	defer eal.mu.Unlock()
	switch eal.state {
	case ealReady:
		return ErrAlreadyInitialized
	case ealFailed:
		return fmt.Errorf("EAL init failed earlier: %w", eal.err)
	case ealCleanedUp:
		return ErrCleanedUp
	}
	res := make(chan error)
	calls := make(chan func())
	go mainLcore(args, calls, res)
	if err := <-res; err != nil {
		eal.state, eal.err = ealFailed, err
		return err
	}
	eal.state, eal.calls = ealReady, calls
	return nil
}

// mainLcore is the goroutine of the EAL's main lcore thread. It never calls
// runtime.UnlockOSThread: when it returns, the runtime ends the thread with
// it, and with it the EAL's pinning and thread-local state.
func mainLcore(args []string, calls <-chan func(), res chan<- error) {
	runtime.LockOSThread()
	argc := len(args) + 1
	argv := (**C.char)(C.calloc(C.size_t(argc+1), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	if argv == nil {
		res <- ErrNoMemory
		return
	}
	av := unsafe.Slice(argv, argc+1)
	av[0] = C.CString(filepath.Base(os.Args[0]))
	for i, a := range args {
		av[i+1] = C.CString(a)
	}
	if r := C.onerma_eal_init(C.int(argc), argv); r < 0 {
		res <- fmt.Errorf("EAL init %q: %w", args, newError("rte_eal_init", int(r)))
		return
	}
	res <- nil
	for fn := range calls {
		fn()
	}
}

// Initialized reports whether Init succeeded and Cleanup has not run.
func Initialized() bool {
	eal.mu.Lock()
	defer eal.mu.Unlock()
	return eal.state == ealReady
}

// Cleanup releases the EAL's resources (rte_eal_cleanup) on the main lcore
// thread and ends that thread. Every port must be stopped and closed, and
// no other goroutine may use DPDK any more. The EAL cannot be initialised
// again in this process.
func Cleanup() error {
	eal.mu.Lock()
	defer eal.mu.Unlock()
	if eal.state != ealReady {
		return ErrNotInitialized
	}
	done := make(chan error)
	eal.calls <- func() { done <- check("rte_eal_cleanup", C.onerma_eal_cleanup()) }
	err := <-done
	close(eal.calls)
	eal.state = ealCleanedUp
	return err
}

// MainLcore is the lcore id of the EAL's main thread.
func MainLcore() uint32 { return uint32(C.onerma_main_lcore()) }

// LcoreCount is the number of lcores the EAL runs (from -l/--lcores),
// not counting registered non-EAL threads.
func LcoreCount() int { return int(C.onerma_lcore_count()) }

// SocketCount is the number of NUMA sockets the EAL detected.
func SocketCount() int { return int(C.onerma_socket_count()) }

// LcoreSocket is the NUMA socket of an lcore.
func LcoreSocket(lcore uint32) int { return int(C.onerma_lcore_socket(C.uint(lcore))) }

// LcoreID is the lcore id of the calling thread: LcoreAny unless it is an
// EAL thread or was registered with RegisterThread. Meaningful only on a
// goroutine locked to its thread.
func LcoreID() uint32 { return uint32(C.onerma_lcore_id()) }

// SocketID is the NUMA socket of the calling thread (SocketAny when unknown).
func SocketID() int { return int(int32(C.onerma_socket_id())) }
