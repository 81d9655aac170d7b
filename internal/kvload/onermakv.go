package kvload

import (
	"errors"

	"github.com/onerma/onerma/kv"
)

// OneRMAKV is an AsyncStore of OneRMA's cache: GETs are one-sided READs
// through the client's portal (StartGet, PollGets), SETs its update RPC,
// pipelined on each replica's connection (StartSet, PollUpdates), so a
// SET holds up none of the GETs in flight.
type OneRMAKV struct {
	c       *kv.Client
	fn      func(tag uint64, val []byte, err error) // the caller's, for report
	wrap    func(tag uint64, val []byte, err error) // o.report, made once
	wrapSet func(tag uint64, err error)             // o.reportSet, made once
}

var (
	_ AsyncStore = (*OneRMAKV)(nil)
	_ Waiter     = (*OneRMAKV)(nil)
	_ Loader     = (*OneRMAKV)(nil)
)

// DialOneRMAKV returns a Dialer of OneRMA's cache: each client its own
// kv.Client (its own portal) with cfg.
func DialOneRMAKV(cfg kv.ClientConfig) Dialer {
	return func() (Store, error) {
		c, err := kv.Dial(cfg)
		if err != nil {
			return nil, err
		}
		o := &OneRMAKV{c: c}
		o.wrap, o.wrapSet = o.report, o.reportSet
		return o, nil
	}
}

// kvErr maps the cache's errors onto the ones the runner handles.
func kvErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kv.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, kv.ErrBusy):
		return ErrBusy
	}
	return err
}

// Get implements Store.
func (o *OneRMAKV) Get(key, dst []byte) ([]byte, error) {
	v, err := o.c.Get(key, dst)
	return v, kvErr(err)
}

// Set implements Store.
func (o *OneRMAKV) Set(key, value []byte) error { return o.c.Set(key, value) }

// StartGet implements AsyncStore.
func (o *OneRMAKV) StartGet(key, dst []byte, tag uint64) error {
	return kvErr(o.c.StartGet(key, dst, tag))
}

// SetMany implements Loader: the SETs pipelined, as many outstanding as
// the client allows (kv.ClientConfig.MaxUpdates). It returns the first
// failure, after every SET has ended.
func (o *OneRMAKV) SetMany(keys, values [][]byte) error {
	var first error
	note := func(_ uint64, err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for i := 0; i < len(keys); {
		switch err := o.c.StartSet(keys[i], values[i], uint64(i)); {
		case err == nil:
			i++
		case errors.Is(err, kv.ErrBusy):
			o.c.WaitUpdates(note)
		default:
			note(0, err)
			i = len(keys)
		}
	}
	for o.c.UpdatesOutstanding() > 0 {
		o.c.WaitUpdates(note)
	}
	return first
}

// StartSet implements AsyncStore.
func (o *OneRMAKV) StartSet(key, value []byte, tag uint64) error {
	return kvErr(o.c.StartSet(key, value, tag))
}

// Poll implements AsyncStore.
func (o *OneRMAKV) Poll(fn func(tag uint64, val []byte, err error)) int {
	o.fn = fn
	return o.c.PollGets(o.wrap) + o.c.PollUpdates(o.wrapSet)
}

// Wait implements Waiter: it sleeps on the engine's completion doorbell
// (kv.Client.WaitGets) while GETs are in flight; the replies of SETs are
// taken when it wakes.
func (o *OneRMAKV) Wait(fn func(tag uint64, val []byte, err error)) int {
	o.fn = fn
	// An error (the engine gone) has ended every GET in flight, each
	// reported to fn with it.
	n, _ := o.c.WaitGets(o.wrap)
	return n + o.c.PollUpdates(o.wrapSet)
}

func (o *OneRMAKV) report(tag uint64, val []byte, err error) { o.fn(tag, val, kvErr(err)) }

func (o *OneRMAKV) reportSet(tag uint64, err error) { o.fn(tag, nil, kvErr(err)) }

// Close implements Store.
func (o *OneRMAKV) Close() error { return o.c.Close() }
