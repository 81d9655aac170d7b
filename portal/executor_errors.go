package portal

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/onerma/onerma/abi"
)

// Sentinels a *ChunkError matches with errors.Is, one per class of
// completion status (ChunkError.Status has the exact one).
var (
	// ErrRemoteAuth: REMOTE_AUTHENTICATION_FAILURE. The key is wrong or
	// was rotated (fetch a new K_d), or the server holds no such region.
	// Never retried.
	ErrRemoteAuth = errors.New("portal: remote authentication failure")
	// ErrTimeout: a chunk completed TIMEOUT more than TimeoutRetries times.
	ErrTimeout = errors.New("portal: op timed out")
	// ErrCongestion: a chunk was NACKed or dispatch-timed-out until it
	// reached MaxAttempts.
	ErrCongestion = errors.New("portal: op retried MaxAttempts times under congestion")
	// ErrRemoteAccess: REMOTE_REGION, REMOTE_BOUNDS or REMOTE_PERMISSION.
	ErrRemoteAccess = errors.New("portal: remote region refused the access")
	// ErrLocalAccess: LOCAL_REGION, LOCAL_BOUNDS or LOCAL_PERMISSION.
	ErrLocalAccess = errors.New("portal: local region refused the access")
	// ErrUnreachable: UNREACHABLE (the remote engine's address did not
	// resolve).
	ErrUnreachable = errors.New("portal: remote engine unreachable")
	// ErrAborted: ABORTED (the engine is shutting down).
	ErrAborted = errors.New("portal: op aborted by the engine")
	// ErrBadCommand: BAD_COMMAND, TOO_LARGE, BAD_SLOT or a status this
	// library does not know.
	ErrBadCommand = errors.New("portal: the engine refused the command")

	// ErrExecutorClosed: the Executor was closed (transfers in progress
	// when Close was called end with it too).
	ErrExecutorClosed = errors.New("portal: executor closed")
)

// statusClass is the sentinel of a failure status.
func statusClass(st abi.Status) error {
	switch st {
	case abi.StatusRemoteAuthFailure:
		return ErrRemoteAuth
	case abi.StatusTimeout:
		return ErrTimeout
	case abi.StatusNack, abi.StatusDispatchTimeout:
		return ErrCongestion
	case abi.StatusRemoteRegion, abi.StatusRemoteBounds, abi.StatusRemotePermission:
		return ErrRemoteAccess
	case abi.StatusLocalRegion, abi.StatusLocalBounds, abi.StatusLocalPermission:
		return ErrLocalAccess
	case abi.StatusUnreachable:
		return ErrUnreachable
	case abi.StatusAborted:
		return ErrAborted
	case abi.StatusEngineGone:
		return ErrEngineGone
	}
	return ErrBadCommand
}

// ChunkError is how a transfer fails on a completion status: it names the
// chunk (its op, remote and local offsets, length), the status of its
// last completion and how many times it was posted. errors.Is matches it
// against the status's class (ErrRemoteAuth, ErrTimeout, ...).
type ChunkError struct {
	Op           OpType
	Remote       netip.Addr
	Region       RegionID
	RemoteOffset uint64 // the chunk's offset in the remote region
	LocalOffset  uint64 // the chunk's offset in the local region
	Length       uint32 // the chunk's length
	Status       Status
	Attempts     int // times the chunk was posted
	// Transfer: the transfer's length; Done: its bytes that completed OK
	// (not necessarily a prefix: chunks complete out of order).
	Transfer, Done uint64
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("portal: executor: %v of %d bytes: chunk of %d bytes at remote offset %d (region %#x on %v), local offset %d: %v after %d attempt(s) (%d bytes done)",
		e.Op, e.Transfer, e.Length, e.RemoteOffset, uint32(e.Region), e.Remote, e.LocalOffset, e.Status, e.Attempts, e.Done)
}

// Is matches the sentinel of the status's class.
func (e *ChunkError) Is(target error) bool { return target == statusClass(e.Status) }
