package kv

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/keyx"
)

// view is what a client knows of one server to read from it: its layout
// and the K_d of its two regions for this client's identity. A new view
// replaces the old one whole (after a Rekey or a restart of the server);
// attempts keep the view they started with.
type view struct {
	Layout
	idxKey, slabKey aesni.Key
	maxRecord       uint32 // the server's largest record
	// lookup: the server's index takes LOOKUPs and lkKey is their K_d
	// (its key exchange granted it); else GETs are READs.
	lookup bool
	lkKey  aesni.Key
}

// replica is one server as one client sees it. The fields above mu
// belong to the client's goroutine (the data path); the goroutine of the
// replica (run) refreshes the view and sends hints, and hands results
// over through fresh and the hint channels.
type replica struct {
	i    int
	addr ServerAddr
	cur  *view // the view GETs use (nil: none yet)
	// Health: a replica whose READ failed is avoided until downUntil,
	// then probed (one READ of its first slot); a probe that fails
	// doubles the wait (up to AvoidMax).
	up        bool
	probing   bool
	downUntil int64 // client clock, ns
	backoff   int64
	stuck     int // hedges that answered past this replica since its last OK READ
	// OK READ delays (the engine's total_delay) for the hedge: the last
	// latWindow, and their p99 recomputed every latWindow samples.
	lat  [latWindow]uint32
	latN int
	p99  int64
	// The batch of hints being filled, and when its first was added.
	hints     *hintBatch
	hintsFrom int64
	// upd is the user goroutine's pipelined connection for SET and
	// DELETE (update.go); no redial before rpcRetry.
	upd      *pipe
	rpcRetry time.Time
	st       ReplicaStats

	// Shared with run.
	fresh    atomic.Pointer[view]
	kick     chan struct{}   // ask run for a new view (buffered 1)
	hintFree chan *hintBatch // empty batches
	hintFull chan *hintBatch // batches to send
	dropped  atomic.Uint64   // hints run could not send
	sent     atomic.Uint64

	// run's own.
	c      *Client
	mu     sync.Mutex // rpcTLS
	rpcTLS *tls.Config
	kxConn *keyx.Conn
	ctl    *rpcConn // run's connection (DESCRIBE, HINTS)
	err    error    // the last refresh failure (under mu)
}

// ReplicaStats are one replica's counters as a client saw them.
type ReplicaStats struct {
	Reads     uint64 // READs completed (bucket and record)
	Failed    uint64 // READs that failed (any status)
	Served    uint64 // GETs answered (hit or miss) from this replica
	Downs     uint64 // times marked down
	Probes    uint64
	ProbesOK  uint64
	Refreshes uint64 // new views taken (new K_d or a restarted server)
	SetErrors uint64 // SETs and DELETEs it did not apply
	Up        bool
	P99Ns     int64 // OK READ delay p99 (the hedge's threshold)
	HintsSent uint64
	HintsLost uint64
}

const (
	latWindow   = 512
	hintBatches = 4
)

// hintBatch is a HINTS message being filled: the op and count header,
// then key hashes.
type hintBatch struct {
	n   int
	buf [3 + 8*MaxHints]byte
}

func (b *hintBatch) add(h uint64) {
	binary.BigEndian.PutUint64(b.buf[3+8*b.n:], h)
	b.n++
}

func (b *hintBatch) frame() []byte {
	b.buf[0] = opHints
	binary.BigEndian.PutUint16(b.buf[1:], uint16(b.n))
	return b.buf[:3+8*b.n]
}

func newReplica(c *Client, i int, addr ServerAddr) *replica {
	r := &replica{i: i, addr: addr, c: c, kick: make(chan struct{}, 1),
		hintFree: make(chan *hintBatch, hintBatches), hintFull: make(chan *hintBatch, hintBatches)}
	for range hintBatches - 1 {
		r.hintFree <- new(hintBatch)
	}
	r.hints = new(hintBatch)
	return r
}

// want asks run for a new view (non-blocking, no allocation).
func (r *replica) want() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// hint adds a key hash to the batch; a full batch goes to run, and a new
// one is taken if run has one free (else the hint is dropped).
func (r *replica) hint(h uint64, now int64) {
	if r.hints == nil {
		select {
		case r.hints = <-r.hintFree:
		default:
			r.dropped.Add(1)
			return
		}
	}
	if r.hints.n == 0 {
		r.hintsFrom = now
	}
	r.hints.add(h)
	if r.hints.n == r.c.cfg.HintBatch {
		r.flushHints()
	}
}

// flushHints hands the batch being filled to run.
func (r *replica) flushHints() {
	if r.hints == nil || r.hints.n == 0 {
		return
	}
	select {
	case r.hintFull <- r.hints:
		r.hints = nil
	default: // run is behind: start over in the same batch
		r.dropped.Add(uint64(r.hints.n))
		r.hints.n = 0
	}
}

// noteLatency records an OK READ's delay for the p99.
func (r *replica) noteLatency(ns uint32, scratch *[latWindow]uint32) {
	r.lat[r.latN%latWindow] = ns
	r.latN++
	if r.latN%latWindow == 0 {
		*scratch = r.lat
		slices.Sort(scratch[:])
		r.p99 = int64(scratch[latWindow*99/100])
	}
}

// run is the replica's goroutine: it fetches views (DESCRIBE and K_d) when
// asked, retrying with backoff while the server cannot be reached, and
// sends the hint batches.
func (r *replica) run(done <-chan struct{}) {
	defer r.closeConns()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	wanted := false
	backoff := r.c.cfg.AvoidFor
	for {
		select {
		case <-done:
			// The batches the client handed over on its way out.
			for {
				select {
				case b := <-r.hintFull:
					r.sendHints(b)
				default:
					return
				}
			}
		case <-r.kick:
			wanted = true
			backoff = r.c.cfg.AvoidFor
		case <-retry.C:
		case b := <-r.hintFull:
			r.sendHints(b)
			r.hintFree <- b
			continue
		}
		if !wanted {
			continue
		}
		if err := r.refresh(); err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			retry.Reset(backoff)
			backoff = min(2*backoff, r.c.cfg.AvoidMax)
			continue
		}
		wanted = false
	}
}

// dropIdleCtl closes the connection of DESCRIBE and hints if the server
// has closed it (an idle one: ServerConfig.IdleTimeout), so that the next
// use dials again rather than lose a batch of hints into it.
func (r *replica) dropIdleCtl() {
	if r.ctl != nil && !r.ctl.alive() {
		r.ctl.close()
		r.ctl = nil
	}
}

func (r *replica) closeConns() {
	if r.ctl != nil {
		r.ctl.close()
		r.ctl = nil
	}
	if r.kxConn != nil {
		r.kxConn.Close()
		r.kxConn = nil
	}
}

// tlsConfig is the client TLS configuration for the RPC's host, and
// that host.
func (r *replica) tlsConfig() (*tls.Config, string, error) {
	host, _, err := net.SplitHostPort(r.addr.RPC)
	if err != nil {
		return nil, "", fmt.Errorf("kv: server %q: %w", r.addr.RPC, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rpcTLS == nil {
		if r.rpcTLS, err = r.c.creds.ClientTLS(host); err != nil {
			return nil, "", fmt.Errorf("kv: %w", err)
		}
	}
	return r.rpcTLS, host, nil
}

// refresh fetches the server's layout and the K_d of its regions, and
// publishes the new view.
func (r *replica) refresh() error {
	tc, host, err := r.tlsConfig()
	if err != nil {
		return err
	}
	timeout := r.c.cfg.RPCTimeout
	var l Layout
	r.dropIdleCtl()
	for attempt := 0; ; attempt++ {
		if r.ctl == nil {
			if r.ctl, err = dialRPC(r.addr.RPC, tc, timeout); err != nil {
				return fmt.Errorf("kv: server %s: %w", r.addr.RPC, r.c.creds.ExplainServerCert(err, host))
			}
		}
		var b []byte
		if b, err = r.ctl.call(timeout, []byte{opDescribe}); err == nil {
			l, err = parseLayout(b)
			break
		}
		r.ctl.close()
		r.ctl = nil
		if attempt == 1 {
			return fmt.Errorf("kv: server %s: describe: %w", r.addr.RPC, err)
		}
	}
	if err != nil {
		return err
	}
	kxAddr := r.addr.Keyx
	if kxAddr == "" {
		kxAddr = net.JoinHostPort(host, strconv.Itoa(int(l.KeyxPort)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	v := &view{Layout: l, maxRecord: recordLen(MaxKeyBytes, int(l.MaxValue))}
	for _, k := range []struct {
		region uint32
		key    *aesni.Key
	}{{l.IndexRegion, &v.idxKey}, {l.SlabRegion, &v.slabKey}} {
		g, err := r.fetch(ctx, kxAddr, keyx.RequestFor(r.c.id, abi.RegionID(k.region), abi.OpRead))
		if err != nil {
			return fmt.Errorf("kv: server %s: K_d: %w", r.addr.RPC, err)
		}
		if g.Owner != l.Owner {
			return fmt.Errorf("kv: server %s: its key exchange names engine %v, its layout %v", r.addr.RPC, g.Owner, l.Owner)
		}
		*k.key = g.Key
	}
	// The LOOKUP K_d: refused when the index takes no LOOKUPs (a server
	// on an older engine, or NoLookup: ErrPermission) or by an older key
	// exchange (a bad request); GETs are READs then. (fetch closes the
	// session on a failure: the next fetch dials again.)
	if g, err := r.fetch(ctx, kxAddr, keyx.RequestFor(r.c.id, abi.RegionID(l.IndexRegion), abi.OpLookup)); err == nil && g.Owner == l.Owner && !r.c.cfg.NoLookup {
		v.lookup, v.lkKey = true, g.Key
	}
	r.fresh.Store(v)
	r.c.refreshed.Store(true)
	r.mu.Lock()
	r.err = nil
	r.mu.Unlock()
	return nil
}

// fetch asks the key exchange for a K_d on the connection kept, dialing
// (again) when there is none or it failed.
func (r *replica) fetch(ctx context.Context, addr string, req keyx.Request) (keyx.Grant, error) {
	for attempt := 0; ; attempt++ {
		if r.kxConn == nil {
			c, err := keyx.Dial(ctx, addr, r.c.creds)
			if err != nil {
				return keyx.Grant{}, err
			}
			r.kxConn = c
		}
		g, err := r.kxConn.Fetch(ctx, req)
		if err == nil {
			return g, nil
		}
		r.kxConn.Close()
		r.kxConn = nil
		var re *keyx.RefusedError
		if errors.As(err, &re) || attempt == 1 {
			return keyx.Grant{}, err
		}
	}
}

// sendHints sends one batch on run's connection (dialing it if needed);
// a batch that cannot be sent is dropped: hints only steer eviction.
func (r *replica) sendHints(b *hintBatch) {
	n := uint64(b.n)
	defer func() { b.n = 0 }()
	r.dropIdleCtl()
	if r.ctl == nil {
		tc, _, err := r.tlsConfig()
		if err == nil {
			r.ctl, err = dialRPC(r.addr.RPC, tc, r.c.cfg.RPCTimeout)
		}
		if err != nil {
			r.dropped.Add(n)
			return
		}
	}
	r.ctl.c.SetDeadline(time.Now().Add(r.c.cfg.RPCTimeout))
	if err := r.ctl.writeFrame(b.frame()); err == nil {
		if err = r.ctl.flush(); err == nil {
			r.sent.Add(n)
			return
		}
	}
	r.ctl.close()
	r.ctl = nil
	r.dropped.Add(n)
}

// lastErr is the last refresh failure (nil after a success).
func (r *replica) lastErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
