package kvload

import (
	"fmt"
	"sync"
)

// loadBatch is how many keys a Loader writes per SetMany.
const loadBatch = 512

// Load is the load phase: it writes every key of w (0..w.Keys-1) with its
// value, split among clients goroutines, each with a Store of its own
// (SetMany batches where the Store is a Loader, else one Set at a time).
func Load(dial Dialer, w Workload, clients int) error {
	if err := w.Validate(); err != nil {
		return err
	}
	clients = max(1, min(clients, int(min(w.Keys, 1<<20))))
	errs := make([]error, clients)
	var wg sync.WaitGroup
	per := (w.Keys + uint64(clients) - 1) / uint64(clients)
	for c := range clients {
		lo, hi := uint64(c)*per, min(uint64(c+1)*per, w.Keys)
		wg.Go(func() { errs[c] = loadRange(dial, w, lo, hi) })
	}
	wg.Wait()
	for c, err := range errs {
		if err != nil {
			return fmt.Errorf("kvload: load client %d: %w", c, err)
		}
	}
	return nil
}

// loadRange writes keys lo..hi-1 through a Store of its own.
func loadRange(dial Dialer, w Workload, lo, hi uint64) error {
	if lo >= hi {
		return nil
	}
	st, err := dial()
	if err != nil {
		return err
	}
	defer st.Close()
	l, batched := st.(Loader)
	n := 1
	if batched {
		n = loadBatch
	}
	keys, vals := make([][]byte, n), make([][]byte, n)
	for i := range n {
		keys[i], vals[i] = make([]byte, KeyBytes), make([]byte, w.ValueBytes)
	}
	for i := lo; i < hi; i += uint64(n) {
		m := int(min(uint64(n), hi-i))
		for j := range m {
			Key(keys[j], i+uint64(j))
			Value(vals[j], i+uint64(j), w.ValueBytes)
		}
		if batched {
			err = l.SetMany(keys[:m], vals[:m])
		} else {
			err = st.Set(keys[0], vals[0])
		}
		if err != nil {
			return fmt.Errorf("keys %d..%d: %w", i, i+uint64(m)-1, err)
		}
	}
	return nil
}
