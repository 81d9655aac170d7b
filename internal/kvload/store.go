package kvload

import "errors"

// The errors a Store returns for conditions the runner handles; any other
// error counts as a failed operation.
var (
	// ErrNotFound is a GET of a key the store does not hold (a miss).
	ErrNotFound = errors.New("kvload: key not found")
	// ErrBusy is an AsyncStore refusing a GET because it has as many in
	// flight as it can keep: poll, then start it again.
	ErrBusy = errors.New("kvload: too many GETs in flight")
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

// AsyncStore is a Store that keeps several GETs in flight from one
// goroutine: StartGet posts one, PollGets reports those that ended.
// Between StartGet and the report of its tag, dst belongs to the store;
// the key is not kept after StartGet returns. Set may be called while
// GETs are in flight.
type AsyncStore interface {
	Store
	// StartGet posts a GET of key whose value will land in dst[:0],
	// reported with tag; ErrBusy when the store has as many in flight as
	// it can keep.
	StartGet(key, dst []byte, tag uint64) error
	// PollGets calls fn for each GET that ended since the last call (val
	// is the value in the dst StartGet was given, or nil with err) and
	// returns how many; it does not block.
	PollGets(fn func(tag uint64, val []byte, err error)) int
}

// Loader is a Store that can write many keys in one go faster than one
// Set after another (pipelined): Load uses it for the load phase.
type Loader interface {
	SetMany(keys, values [][]byte) error
}

// Dialer opens one client of a running system: each of a run's clients
// dials its own.
type Dialer func() (Store, error)
