package soak

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// keys is what an application holds to reach one region of one owner:
// where it is, and the K_d of its identity for READ and WRITE.
type keys struct {
	valid bool
	view
	read, write portal.Key
	at          time.Time // when the fetch began: K_d of a key replaced after it may be stale
}

// keyring is one application's K_d for one role of region of every
// owner, fetched over each owner's key service on a connection it keeps.
// Not safe for concurrent use.
type keyring struct {
	creds   *keyx.Credentials
	owners  []*owner
	role    role
	conns   []*keyx.Conn
	ks      []keys
	retryAt []time.Time
	// Fetches counts K_d fetched (one per op kind); Failed the fetches
	// that failed (an owner between two registrations, a refused id);
	// Redials the connections dialled again after the owner closed them.
	Fetches, Failed, Redials uint64
}

func newKeyring(creds *keyx.Credentials, owners []*owner, r role) *keyring {
	n := len(owners)
	return &keyring{creds: creds, owners: owners, role: r, conns: make([]*keyx.Conn, n), ks: make([]keys, n), retryAt: make([]time.Time, n)}
}

// get returns the keys for owner t's region as the application with
// identity id, fetching them if they are missing. It returns nil (and
// the error) when they cannot be had now; the next try waits a little.
func (k *keyring) get(t int, id portal.Identity) (*keys, error) {
	if k.ks[t].valid {
		return &k.ks[t], nil
	}
	now := time.Now()
	if now.Before(k.retryAt[t]) {
		return nil, nil
	}
	ks, err := k.fetch(t, id)
	if err != nil {
		k.Failed++
		k.retryAt[t] = time.Now().Add(20 * time.Millisecond)
		return nil, err
	}
	k.ks[t] = ks
	return &k.ks[t], nil
}

func (k *keyring) fetch(t int, id portal.Identity) (keys, error) {
	o := k.owners[t]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		kept := k.conns[t] != nil
		if !kept {
			c, err := keyx.Dial(ctx, o.addr, k.creds)
			if err != nil {
				return keys{}, err
			}
			k.conns[t] = c
		}
		ks, err := k.exchange(ctx, t, id)
		if err == nil {
			return ks, nil
		}
		k.conns[t].Close()
		k.conns[t] = nil
		var re *keyx.RefusedError
		if !kept || errors.As(err, &re) {
			return keys{}, err
		}
		// The owner's key service closes a connection idle for longer
		// than its timeout (10 s): dial again, once.
		k.Redials++
	}
}

// exchange fetches owner t's K_d for READ and WRITE on its current
// region on the connection kept.
func (k *keyring) exchange(ctx context.Context, t int, id portal.Identity) (keys, error) {
	ks := keys{at: time.Now(), view: k.owners[t].region(k.role)}
	for _, op := range []portal.OpType{portal.OpRead, portal.OpWrite} {
		g, err := k.conns[t].Fetch(ctx, keyx.RequestFor(id, ks.id, op))
		if err != nil {
			return keys{}, fmt.Errorf("K_d for %v on region %#x of owner %d: %w", op, uint32(ks.id), t+1, err)
		}
		if g.Owner != ks.addr {
			return keys{}, fmt.Errorf("owner %d's key service names %s as the region's engine, want %s", t+1, g.Owner, ks.addr)
		}
		if op == portal.OpRead {
			ks.read = g.Key
		} else {
			ks.write = g.Key
		}
		k.Fetches++
	}
	ks.valid = true
	return ks, nil
}

// stale drops owner t's keys if they are the ones fetched at at: an op
// that used them failed authentication (a rekey, or the region is gone).
func (k *keyring) stale(t int, at time.Time) {
	if k.ks[t].valid && k.ks[t].at.Equal(at) {
		k.ks[t].valid = false
	}
}

// forget drops every key (the application's identity may have changed).
func (k *keyring) forget() {
	for t := range k.ks {
		k.ks[t].valid = false
	}
}

func (k *keyring) close() {
	for _, c := range k.conns {
		if c != nil {
			c.Close()
		}
	}
}
