package kvload

import "errors"

// The errors a Store returns for conditions the runner handles; any other
// error counts as a failed operation.
var (
	// ErrNotFound is a GET of a key the store does not hold (a miss).
	ErrNotFound = errors.New("kvload: key not found")
	// ErrBusy is an AsyncStore refusing an operation because it has as
	// many in flight as it can keep: poll, then start it again.
	ErrBusy = errors.New("kvload: too many operations in flight")
)

// Store is a client of one key/value system, used by one goroutine at a
// time: every call returns when the operation is done.
type Store interface {
	// Get appends key's value to dst[:0] and returns it, or ErrNotFound.
	// The key is not kept after Get returns.
	Get(key, dst []byte) ([]byte, error)
	// Set stores value under key; neither is kept after Set returns.
	Set(key, value []byte) error
	Close() error
}

// AsyncStore is a Store that keeps several operations in flight from one
// goroutine: StartGet and StartSet post one, Poll reports those that
// ended. Between StartGet and the report of its tag, dst belongs to the
// store; keys and SET values are not kept after StartGet and StartSet
// return.
type AsyncStore interface {
	Store
	// StartGet posts a GET of key whose value will land in dst[:0],
	// reported with tag; ErrBusy when the store has as many in flight as
	// it can keep.
	StartGet(key, dst []byte, tag uint64) error
	// StartSet posts a SET of value under key, reported with tag (and a
	// nil val); ErrBusy as StartGet.
	StartSet(key, value []byte, tag uint64) error
	// Poll calls fn for each operation that ended since the last call
	// (val is a GET's value in the dst StartGet was given, or nil with
	// err) and returns how many; it does not block.
	Poll(fn func(tag uint64, val []byte, err error)) int
}

// Waiter is an AsyncStore that can also wait for an operation to end
// (Wait: Poll that blocks while some are in flight and none has ended):
// a closed-loop client with nothing to send waits with it rather than
// spinning on Poll, so a store whose engine polls on a CPU the client
// shares gets that CPU.
type Waiter interface {
	Wait(fn func(tag uint64, val []byte, err error)) int
}

// Loader is a Store that can write many keys in one go faster than one
// Set after another (pipelined): Load uses it for the load phase.
type Loader interface {
	SetMany(keys, values [][]byte) error
}

// Dialer opens one client of a running system: each of a run's clients
// dials its own.
type Dialer func() (Store, error)
