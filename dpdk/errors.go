package dpdk

/*
#include "onerma_dpdk.h"
*/
import "C"

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Error is a failed DPDK call. Errno is the positive error number DPDK
// reported (rte_errno or a negated return value); it may be one of DPDK's
// own codes (E_RTE_SECONDARY, E_RTE_NO_CONFIG, >= 1001) that have no
// unix.Errno name. errors.Is(err, unix.ENODEV) and the like work through
// Unwrap.
type Error struct {
	Op    string     // the C function that failed, e.g. "rte_eth_dev_configure"
	Errno unix.Errno // positive
	msg   string     // rte_strerror(Errno), captured when the error was made
}

func (e *Error) Error() string { return "dpdk: " + e.Op + ": " + e.msg }

// Unwrap returns the errno so errors.Is matches unix.Errno values.
func (e *Error) Unwrap() error { return e.Errno }

// newError builds an Error from a positive or negative error number.
// Control path only: it makes a cgo call for the message.
func newError(op string, errno int) error {
	if errno < 0 {
		errno = -errno
	}
	if errno == 0 {
		errno = int(unix.EINVAL) // a failure that forgot its errno
	}
	return &Error{Op: op, Errno: unix.Errno(errno), msg: C.GoString(C.onerma_strerror(C.int(errno)))}
}

// check turns a DPDK return value (negative errno on failure) into an error.
func check(op string, r C.int) error {
	if r < 0 {
		return newError(op, int(r))
	}
	return nil
}

// Sentinel errors of this package (not DPDK's).
var (
	// ErrNotInitialized: the EAL has not been initialised (Init).
	ErrNotInitialized = errors.New("dpdk: EAL not initialised")
	// ErrAlreadyInitialized: Init was called a second time; the EAL can be
	// initialised once per process.
	ErrAlreadyInitialized = errors.New("dpdk: EAL already initialised")
	// ErrCleanedUp: the EAL was cleaned up and cannot be used again.
	ErrCleanedUp = errors.New("dpdk: EAL cleaned up")
	// ErrNoMemory: a C allocation failed.
	ErrNoMemory = errors.New("dpdk: out of C memory")
)
