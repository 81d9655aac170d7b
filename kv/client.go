package kv

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// ServerAddr is where a client reaches one server.
type ServerAddr struct {
	RPC  string // the update RPC, HOST:PORT (also the server's name on the ring)
	Keyx string // the key exchange, HOST:PORT ("": RPC's host, the port the server reports)
}

// ClientConfig configures a Client. Zero fields take the defaults noted.
type ClientConfig struct {
	Socket  string         // the engine's control socket (required)
	Name    string         // the portal's name (default "kv-client")
	Portal  portal.Options // ring sizes, WaitSpins
	Servers []ServerAddr   // every server (any order: the ring places keys by the servers' RPC addresses)
	// Replicas is R, the servers holding each key (default min(3,
	// servers)).
	Replicas int
	// Credentials are client credentials (keyx.LoadClient, Inherited);
	// or CredsDir, a directory keyx.LoadClient reads.
	Credentials *keyx.Credentials
	CredsDir    string
	// MaxInFlight bounds the GETs outstanding at once (default 64).
	MaxInFlight int
	// MaxUpdates bounds the SETs and DELETEs outstanding at once
	// (StartSet, StartDelete; default 16).
	MaxUpdates int
	// MaxValue is the largest value a GET reads (default 64 KB); a
	// larger one fails with ErrValueTooLarge. It sizes the client's sink
	// region: about (2 × MaxInFlight + servers) × (MaxValue + 4 KB).
	MaxValue int
	// Hedge sends a second READ of the bucket to the next replica when
	// the first has waited longer than its replica's p99 (at least
	// HedgeMin, default 50 µs); the first answer wins.
	Hedge    bool
	HedgeMin time.Duration
	// AvoidFor is how long a replica whose READ failed is avoided before
	// it is probed (default 10 ms); each failed probe doubles it, up to
	// AvoidMax (default 1 s).
	AvoidFor, AvoidMax time.Duration
	// HintBatch is the access hints sent to a server at once (default
	// 256, at most MaxHints); HintFlush sends a partial batch older than
	// it (default 10 ms).
	HintBatch int
	HintFlush time.Duration
	// NoLookup reads every GET with READs (the bucket, then the record)
	// even from servers whose index takes LOOKUPs. Otherwise a GET of a
	// server that grants a LOOKUP K_d is one LOOKUP of the key's hash in
	// its bucket: the slot and its record in one round trip; it goes on
	// with READs when the record does not fit one LOOKUP, when the slot
	// found is not the key's, and when the engine refuses the op.
	NoLookup bool
	// RPCTimeout bounds each RPC and key exchange (default 5 s).
	RPCTimeout time.Duration
	// VNodes is the ring's points per server (default 160).
	VNodes int
}

func (cfg *ClientConfig) setDefaults() error {
	if cfg.Socket == "" {
		return errors.New("kv: client: no engine socket")
	}
	if len(cfg.Servers) == 0 || len(cfg.Servers) > MaxServers {
		return fmt.Errorf("kv: client: %d servers, want 1..%d", len(cfg.Servers), MaxServers)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if cfg.Name == "" {
		cfg.Name = "kv-client"
	}
	def(&cfg.Replicas, min(3, len(cfg.Servers)))
	def(&cfg.MaxInFlight, 64)
	def(&cfg.MaxUpdates, 16)
	def(&cfg.MaxValue, DefaultMaxValue)
	def(&cfg.HintBatch, 256)
	def(&cfg.VNodes, 160)
	defD(&cfg.HedgeMin, 50*time.Microsecond)
	defD(&cfg.AvoidFor, 10*time.Millisecond)
	defD(&cfg.AvoidMax, time.Second)
	defD(&cfg.HintFlush, 10*time.Millisecond)
	defD(&cfg.RPCTimeout, 5*time.Second)
	switch {
	case cfg.Replicas < 1 || cfg.Replicas > min(len(cfg.Servers), MaxReplicas):
		return fmt.Errorf("kv: client: Replicas = %d, want 1..%d", cfg.Replicas, min(len(cfg.Servers), MaxReplicas))
	case cfg.MaxInFlight < 1 || cfg.MaxInFlight > 4096:
		return fmt.Errorf("kv: client: MaxInFlight = %d, want 1..4096", cfg.MaxInFlight)
	case cfg.MaxUpdates < 1 || cfg.MaxUpdates > 4096:
		return fmt.Errorf("kv: client: MaxUpdates = %d, want 1..4096", cfg.MaxUpdates)
	case cfg.MaxValue < 0 || cfg.MaxValue > MaxValueBytes:
		return fmt.Errorf("kv: client: MaxValue = %d, want 0..%d", cfg.MaxValue, MaxValueBytes)
	case cfg.HintBatch < 1 || cfg.HintBatch > MaxHints:
		return fmt.Errorf("kv: client: HintBatch = %d, want 1..%d", cfg.HintBatch, MaxHints)
	case cfg.VNodes < 1 || cfg.VNodes > 4096:
		return fmt.Errorf("kv: client: VNodes = %d, want 1..4096", cfg.VNodes)
	case cfg.AvoidMax < cfg.AvoidFor:
		return fmt.Errorf("kv: client: AvoidMax %v below AvoidFor %v", cfg.AvoidMax, cfg.AvoidFor)
	}
	return nil
}

// Client errors.
var (
	// ErrNotFound: no replica asked holds the key.
	ErrNotFound = errors.New("kv: not found")
	// ErrBusy: MaxInFlight GETs are outstanding (StartGet, Get), or
	// MaxUpdates SETs and DELETEs (StartSet, StartDelete, Set, Delete).
	ErrBusy = errors.New("kv: too many GETs or updates outstanding")
	// ErrUnavailable: every replica of the key failed, twice.
	ErrUnavailable = errors.New("kv: no replica of the key answered")
	// ErrValueTooLarge: the value is larger than ClientConfig.MaxValue.
	ErrValueTooLarge = errors.New("kv: value larger than the client's MaxValue")
	// ErrKey: an empty key or one longer than MaxKeyBytes.
	ErrKey = errors.New("kv: key empty or longer than 250 bytes")
	// ErrNotGranted: the server's permits do not grant this client's
	// certificate the request (a SET or DELETE of a client granted READ
	// alone, anything of one it does not name); the refusal says which.
	ErrNotGranted = errors.New("kv: not granted")
	// ErrRevoked: the CA revoked this client's certificate.
	ErrRevoked = errors.New("kv: certificate revoked")
)

// Client reads a sharded, replicated cache with one-sided READs and
// updates it over the servers' RPC. It is not safe for concurrent use:
// one Client per goroutine (like a portal). The replicas' goroutines it
// starts refresh K_d and send access hints.
type Client struct {
	cfg   ClientConfig
	p     *portal.Portal
	id    portal.Identity
	creds *keyx.Credentials
	ring  *ring
	reps  []*replica
	sink  *portal.Region
	area  uint64 // sink bytes per attempt
	// noLookup: the local engine refused a LOOKUP (BAD_COMMAND: an engine
	// without the op); every GET reads with READs from then on.
	noLookup bool
	t0       time.Time
	gets     []getOp
	freeG    []int32
	done     []int32 // GETs finished and not yet reported
	atts     []attempt
	freeA    []int32
	waiting  []int32 // attempts with chunks to post when a slot frees
	active   int     // GETs started and not reported
	running  int     // of them, not finished
	cpl      [64]abi.Completion
	scratch  [latWindow]uint32
	hedgeAt  int64 // earliest pending hedge (0: none)
	due      dueCtx
	// reported: the server and failovers of the GET being reported
	// (Reported).
	reported [2]int
	st       ClientStats
	// failovers counts the attempts a GET left for another replica
	// (FailoversTotal plus Corrupt), for Failovers.
	failovers uint64
	// Updates (update.go): the pool, those ended and not yet reported,
	// the replies the pipes' goroutines hand back, and those goroutines.
	upds    []updateOp
	freeU   []int32
	doneU   []int32
	replies chan updateReply
	pipes   sync.WaitGroup

	refreshed atomic.Bool // a replica published a new view
	stop      chan struct{}
	wg        sync.WaitGroup
	closed    bool
}

// ClientStats are a client's counters.
type ClientStats struct {
	Gets, Hits, Misses, Errors uint64
	// Retries: bucket or record READs done again because what they read
	// was being changed (a race with a SET: odd sequence, a sum that
	// failed, a replaced record).
	Retries uint64
	// RetriesExhausted: GETs that raced SETs of their key maxRetries
	// times on one replica and went to the next.
	RetriesExhausted uint64
	// Failovers by the status of the READ that failed (indexed by
	// abi.Status); Corrupt: replicas left because what they returned
	// could not be decoded.
	Failovers [abi.NumStatus]uint64
	Corrupt   uint64
	// Hedges sent, and GETs the hedge answered first.
	Hedges, HedgeWins uint64
	// Lookups completed (the first op of a GET on a server that takes
	// them); LookupReads: GETs that went on with READs after one (a record
	// beyond one LOOKUP, a slot not the key's, the op refused).
	Lookups, LookupReads uint64
	Sets, Deletes        uint64
	// The pools: attempts (a READ sequence on one replica, with its slice
	// of the sink) and the portal's slots, free and in all. With no GET
	// outstanding and every READ completed, all are free.
	FreeAttempts, Attempts int
	FreeSlots, Slots       int
	Replicas               []ReplicaStats
}

// FailoversTotal sums Failovers.
func (s *ClientStats) FailoversTotal() uint64 {
	var n uint64
	for _, v := range s.Failovers {
		n += v
	}
	return n
}

// Dial opens a portal on the engine, registers the sink region, and
// fetches every server's layout and K_d. A server that cannot be reached
// is left down and tried again in the background; Dial fails only when
// none can.
func Dial(cfg ClientConfig) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, creds: cfg.Credentials, t0: time.Now(), stop: make(chan struct{})}
	if c.creds == nil {
		if cfg.CredsDir == "" {
			return nil, errors.New("kv: client: no credentials (Credentials or CredsDir)")
		}
		var err error
		if c.creds, err = keyx.LoadClient(cfg.CredsDir); err != nil {
			return nil, fmt.Errorf("kv: client: %w", err)
		}
	}
	names := make([]string, len(cfg.Servers))
	for i, s := range cfg.Servers {
		names[i] = s.RPC
	}
	var err error
	if c.ring, err = newRing(names, cfg.VNodes); err != nil {
		return nil, err
	}
	if c.p, err = portal.DialOptions(cfg.Socket, cfg.Name, cfg.Portal); err != nil {
		return nil, fmt.Errorf("kv: client: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	c.id = c.p.Identity()
	if err := c.allocate(); err != nil {
		return nil, err
	}
	var errs []error
	for i, s := range cfg.Servers {
		r := newReplica(c, i, s)
		c.reps = append(c.reps, r)
		if err := r.refresh(); err != nil {
			errs = append(errs, err)
			r.want()
		}
	}
	if len(errs) == len(c.reps) {
		return nil, errors.Join(errs...)
	}
	c.takeViews(c.now())
	for _, r := range c.reps {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			r.run(c.stop)
		}()
	}
	ok = true
	return c, nil
}

// allocate takes the portal's slots and the sink region, and makes the
// GET and attempt pools: MaxInFlight GETs; two attempts each (a hedge or
// an orphan still completing) and one probe per server.
func (c *Client) allocate() error {
	nAtt := 2*c.cfg.MaxInFlight + len(c.cfg.Servers)
	// As many slots as attempts and some for records' further READs,
	// within what the engine grants: fewer only make READs wait.
	want := min(c.p.MaxSlots(), nAtt+16)
	for n := min(want, 256); c.p.Slots() < want; {
		if _, err := c.p.AllocSlots(n); err != nil {
			short := errors.Is(err, portal.ErrSlotCap) || errors.Is(err, portal.ErrQuota) || errors.Is(err, portal.ErrNoSlots)
			if !short || n == 1 {
				if c.p.Slots() > 0 && short {
					break
				}
				return fmt.Errorf("kv: client: %w", err)
			}
			n /= 2
			continue
		}
		n = min(n, want-c.p.Slots())
	}
	c.area = abi.MaxOpBytes + roundUp(uint64(recordLen(MaxKeyBytes, c.cfg.MaxValue)), slabAlign)
	var err error
	if c.sink, err = c.p.RegisterRegion(uint64(nAtt)*c.area, abi.PermLocalWrite); err != nil {
		return fmt.Errorf("kv: client: sink region: %w", err)
	}
	c.gets = make([]getOp, c.cfg.MaxInFlight)
	c.freeG = make([]int32, 0, len(c.gets))
	for i := len(c.gets) - 1; i >= 0; i-- {
		c.freeG = append(c.freeG, int32(i))
	}
	c.done = make([]int32, 0, len(c.gets))
	c.atts = make([]attempt, nAtt)
	c.freeA = make([]int32, 0, nAtt)
	for i := nAtt - 1; i >= 0; i-- {
		c.atts[i].get = -1
		c.freeA = append(c.freeA, int32(i))
	}
	c.waiting = make([]int32, 0, nAtt)
	c.allocateUpdates()
	return nil
}

// now is the client's clock: ns since Dial (monotonic).
func (c *Client) now() int64 { return int64(time.Since(c.t0)) }

// takeViews installs the views the replicas' goroutines published: a
// replica with new keys or layout is up again at once; one whose view
// came back unchanged stays as it was (its probes decide).
func (c *Client) takeViews(now int64) {
	for _, r := range c.reps {
		v := r.fresh.Load()
		if v == nil || v == r.cur {
			continue
		}
		same := r.cur != nil && v.Layout == r.cur.Layout && v.idxKey == r.cur.idxKey && v.slabKey == r.cur.slabKey
		if r.cur != nil && !same {
			r.st.Refreshes++
		}
		r.cur = v
		if !same { // new keys or a new server: try it at once; else the probes decide
			r.up, r.downUntil, r.backoff = true, 0, 0
		}
	}
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats {
	s := c.st
	s.FreeAttempts, s.Attempts = len(c.freeA), len(c.atts)
	s.FreeSlots, s.Slots = c.p.FreeSlots(), c.p.Slots()
	s.Replicas = make([]ReplicaStats, len(c.reps))
	for i, r := range c.reps {
		rs := r.st
		rs.Up, rs.P99Ns = r.up, r.p99
		rs.HintsSent, rs.HintsLost = r.sent.Load(), r.dropped.Load()
		s.Replicas[i] = rs
	}
	return s
}

// Failovers is how many times a GET left a replica for the next one
// (ClientStats' Failovers and Corrupt summed); cheap enough to read after
// every GET.
func (c *Client) Failovers() uint64 { return c.failovers }

// ReplicaError is the last failure of replica i's background refresh (nil
// when its last one succeeded).
func (c *Client) ReplicaError(i int) error { return c.reps[i].lastErr() }

// Identity is the identity the client's engine stamps on its READs.
func (c *Client) Identity() portal.Identity { return c.id }

// ServerStats asks server i for its counters over the RPC, on a
// connection of its own (the update connection is pipelined).
func (c *Client) ServerStats(i int) (StoreStats, error) {
	rc, err := c.reps[i].dial()
	if err != nil {
		return StoreStats{}, err
	}
	defer rc.close()
	b, err := rc.call(c.cfg.RPCTimeout, []byte{opStats})
	if err != nil {
		return StoreStats{}, err
	}
	return parseStats(b)
}

// Close sends the hints gathered, stops the replicas' goroutines, closes
// the RPC connections and the portal (outstanding GETs are abandoned).
// Close is idempotent.
func (c *Client) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	for _, r := range c.reps {
		r.flushHints()
	}
	close(c.stop)
	c.wg.Wait()
	for _, r := range c.reps {
		r.dropPipe()
		r.closeConns()
	}
	c.pipes.Wait()
	if c.p != nil {
		return c.p.Close()
	}
	return nil
}

// popFront removes and returns the first index of a non-empty queue of
// finished operations, keeping the order and the slice's memory (the
// queues hold at most MaxInFlight or MaxUpdates entries).
func popFront(q *[]int32) int32 {
	i := (*q)[0]
	copy(*q, (*q)[1:])
	*q = (*q)[:len(*q)-1]
	return i
}
