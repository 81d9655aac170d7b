package kvload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/onerma/onerma/internal/cpupin"
)

// Config is one run against one system.
type Config struct {
	Workload Workload
	// Clients is how many goroutines drive the system, each with a
	// Store of its own (a connection, for memcached and Redis).
	Clients int
	// Depth is how many GETs each client keeps in flight; above 1 the
	// Stores must be AsyncStores (one goroutine, Depth in flight).
	Depth int
	// Rate, when above 0, makes the run open loop: operations arrive at
	// Rate per second in all, at Poisson times fixed in advance, and
	// each one's latency counts from its arrival (its intended send
	// time), however late a busy client sends it, so a stalled system
	// is charged for every request that waited (no coordinated
	// omission). 0: closed loop, each client sending its next operation
	// when the last one ends, latency from the send.
	Rate float64
	// Warmup runs before the measurement and is not counted.
	Warmup time.Duration
	// Duration is the measurement.
	Duration time.Duration
	// Drain (open loop) is how long past the measurement its arrivals
	// may still be sent; those that are not are counted Unserved. 0:
	// Duration.
	Drain time.Duration
	// CPU, if set, measures the serving side's processes during the
	// measurement (Result.ServerCPU).
	CPU *CPUMeter
	// ClientCPUs, when set, pins client i's goroutine to its own OS
	// thread on CPU ClientCPUs[i % len]: for a system whose polling
	// engine owns the other CPUs, so the clients never take its CPU.
	ClientCPUs []int
}

// Validate says what is wrong with c, if anything.
func (c Config) Validate() error {
	if err := c.Workload.Validate(); err != nil {
		return err
	}
	switch {
	case c.Clients < 1:
		return fmt.Errorf("kvload: Clients %d: want at least 1", c.Clients)
	case c.Depth < 0:
		return fmt.Errorf("kvload: Depth %d: want 0 or more", c.Depth)
	case c.Rate < 0:
		return fmt.Errorf("kvload: Rate %v: want 0 (closed loop) or more", c.Rate)
	case c.Duration <= 0 || c.Warmup < 0 || c.Drain < 0:
		return fmt.Errorf("kvload: Duration %v, Warmup %v, Drain %v: want a positive duration and no negative ones", c.Duration, c.Warmup, c.Drain)
	}
	return nil
}

// Result is what a run measured. Latency histograms hold nanoseconds of
// the operations that ended without error and were sent (closed loop)
// or arrived (open loop) during the measurement.
type Result struct {
	// GetsDone and SetsDone: operations that ended without error during
	// the measurement (its throughput).
	GetsDone, SetsDone uint64
	// Of the operations sent (arrived) during the measurement: GETs of a
	// key the store did not hold, GETs answered with a value that is not
	// the key's, and operations that failed otherwise (the first such
	// error in FirstError).
	Misses, Bad, Errors uint64
	FirstError          error
	// Unserved (open loop): arrivals of the measurement not sent by the
	// end of the drain; their latencies are missing from GetLat and
	// SetLat, so a run with any is past its system's saturation.
	Unserved uint64
	Seconds  float64 // the measurement's length
	Offered  float64 // open loop: Config.Rate
	GetLat   *hdrhistogram.Histogram
	SetLat   *hdrhistogram.Histogram
	// Lag (open loop): how long after its arrival each operation was
	// sent: the time waiting for a free client, plus the generator's own
	// wake-up error (which GetLat and SetLat include).
	Lag *hdrhistogram.Histogram
	// ServerCPU is the CPU time Config.CPU's processes used during the
	// measurement (0 without one).
	ServerCPU time.Duration
}

// CPUSecPerMGet is the serving side's CPU seconds per million GETs done
// (0 without a CPU meter).
func (r *Result) CPUSecPerMGet() float64 {
	if r.GetsDone == 0 {
		return 0
	}
	return r.ServerCPU.Seconds() / (float64(r.GetsDone) / 1e6)
}

// maxLatencyNs is the largest latency the histograms keep apart; longer
// ones are recorded as this.
const maxLatencyNs = 60_000_000_000

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, maxLatencyNs, 3) }

func record(h *hdrhistogram.Histogram, d time.Duration) {
	h.RecordValue(min(max(int64(d), 1), maxLatencyNs)) // in range: no error
}

func newResult() *Result {
	return &Result{GetLat: newHist(), SetLat: newHist(), Lag: newHist()}
}

// GetsPerSec is the measurement's GET throughput.
func (r *Result) GetsPerSec() float64 { return float64(r.GetsDone) / r.Seconds }

// SetsPerSec is the measurement's SET throughput.
func (r *Result) SetsPerSec() float64 { return float64(r.SetsDone) / r.Seconds }

// Failed is how many of the measurement's operations did not end well.
func (r *Result) Failed() uint64 { return r.Misses + r.Bad + r.Errors }

// Saturated says whether an open-loop run offered more than its system
// served: arrivals left unserved, a throughput below 95 % of the offered
// load, or half the operations waiting over a millisecond for a free
// client (a backlog that grew through the measurement).
func (r *Result) Saturated() bool {
	return r.Offered > 0 && (r.Unserved > 0 || float64(r.GetsDone+r.SetsDone) < 0.95*r.Offered*r.Seconds ||
		r.Lag.ValueAtQuantile(50) > int64(time.Millisecond))
}

func (r *Result) merge(o *Result) {
	r.GetsDone += o.GetsDone
	r.SetsDone += o.SetsDone
	r.Misses += o.Misses
	r.Bad += o.Bad
	r.Errors += o.Errors
	if r.FirstError == nil {
		r.FirstError = o.FirstError
	}
	r.Unserved += o.Unserved
	r.GetLat.Merge(o.GetLat)
	r.SetLat.Merge(o.SetLat)
	r.Lag.Merge(o.Lag)
}

// clock is a run's timeline: offsets from its start on the monotonic
// clock; the measurement is [warm, end).
type clock struct {
	t0        time.Time
	warm, end time.Duration
	drainEnd  time.Duration
}

func (k *clock) now() time.Duration { return time.Since(k.t0) }

// arrivals is an open-loop run's Poisson arrival times, shared by its
// clients: each takes the next when it is free to send it.
type arrivals struct {
	mu    sync.Mutex
	rng   *rand.Rand
	gapNs float64 // mean gap
	next  time.Duration
	end   time.Duration
}

// claim returns the next arrival, or false once they reach the end.
func (a *arrivals) claim() (time.Duration, bool) {
	a.mu.Lock()
	at := a.next
	if at >= a.end {
		a.mu.Unlock()
		return 0, false
	}
	a.next += time.Duration(a.rng.ExpFloat64() * a.gapNs)
	a.mu.Unlock()
	return at, true
}

// client is one goroutine's share of a run.
type client struct {
	cfg  *Config
	clk  *clock
	st   Store
	src  *opSource
	res  *Result
	key  [KeyBytes]byte
	val  []byte // the value a SET writes
	dst  []byte // where a GET's value lands
	pace *pacer // open loop only
	// pinErr: Config.ClientCPUs could not be applied; the client ran nothing.
	pinErr error
}

// do runs op synchronously.
func (c *client) do(op Op) error {
	size := c.cfg.Workload.ValueBytes
	k := Key(c.key[:], op.Key)
	if op.Set {
		return c.st.Set(k, Value(c.val, op.Key, size))
	}
	v, err := c.st.Get(k, c.dst[:0])
	if err != nil {
		return err
	}
	c.dst = v[:0] // keep a buffer the store grew
	if !checkValue(v, op.Key, size) {
		return errBadValue
	}
	return nil
}

// account records an operation that arrived (open loop) or was sent
// (closed loop) at at and ended at done with err.
func (c *client) account(op Op, err error, at, done time.Duration) {
	r, k := c.res, c.clk
	if err == nil && done >= k.warm && done < k.end {
		if op.Set {
			r.SetsDone++
		} else {
			r.GetsDone++
		}
	}
	if at < k.warm || at >= k.end {
		return
	}
	switch {
	case err == nil && op.Set:
		record(r.SetLat, done-at)
	case err == nil:
		record(r.GetLat, done-at)
	case errors.Is(err, ErrNotFound):
		r.Misses++
	case errors.Is(err, errBadValue):
		r.Bad++
	default:
		r.Errors++
		if r.FirstError == nil {
			r.FirstError = err
		}
	}
}

// closedSync is a closed-loop client of a Store.
func (c *client) closedSync() {
	for {
		at := c.clk.now()
		if at >= c.clk.end {
			return
		}
		op := c.src.next()
		err := c.do(op)
		c.account(op, err, at, c.clk.now())
	}
}

// openSync is an open-loop client of a Store: it takes the next arrival
// when it is free, waits for its time if that is still to come, and
// counts its latency from that time.
func (c *client) openSync(arr *arrivals) {
	for {
		at, ok := arr.claim()
		if !ok {
			return
		}
		if c.clk.now() >= c.clk.drainEnd {
			if at >= c.clk.warm {
				c.res.Unserved++
			}
			continue
		}
		err := c.pace.until(c.clk.t0, at)
		if at >= c.clk.warm {
			record(c.res.Lag, c.clk.now()-at)
		}
		op := c.src.next()
		if err == nil {
			err = c.do(op)
		}
		c.account(op, err, at, c.clk.now())
	}
}

// Run dials cfg.Clients clients with dial, runs cfg's workload on them
// (the keys must have been loaded: Load), closes them and returns what
// it measured.
func Run(dial Dialer, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	depth := max(cfg.Depth, 1)
	cs := make([]*client, cfg.Clients)
	closeAll := func() {
		for _, c := range cs {
			if c != nil {
				c.st.Close()
				if c.pace != nil {
					c.pace.Close()
				}
			}
		}
	}
	spin := new(spinBudget) // the open-loop clients' pacers share it
	for i := range cs {
		st, err := dial()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("kvload: dial client %d: %w", i, err)
		}
		cs[i] = &client{cfg: &cfg, st: st, src: cfg.Workload.source(uint64(i)), res: newResult(),
			val: make([]byte, cfg.Workload.ValueBytes), dst: make([]byte, 0, cfg.Workload.ValueBytes)}
		if cfg.Rate > 0 {
			if cs[i].pace, err = newPacer(spin); err != nil {
				closeAll()
				return nil, fmt.Errorf("kvload: client %d: %w", i, err)
			}
		}
		if _, ok := st.(AsyncStore); depth > 1 && !ok {
			closeAll()
			return nil, fmt.Errorf("kvload: Depth %d needs an AsyncStore, and %T is not", depth, st)
		}
	}
	drain := cfg.Drain
	if drain == 0 {
		drain = cfg.Duration
	}
	clk := &clock{warm: cfg.Warmup, end: cfg.Warmup + cfg.Duration}
	clk.drainEnd = clk.end + drain
	res := newResult()
	var arr *arrivals
	if cfg.Rate > 0 {
		arr = &arrivals{rng: rand.New(rand.NewPCG(cfg.Workload.Seed, 0)), gapNs: 1e9 / cfg.Rate, end: clk.end}
		arr.next = time.Duration(arr.rng.ExpFloat64() * arr.gapNs)
	}
	var wg sync.WaitGroup
	clk.t0 = time.Now()
	var cpuErr error
	if cfg.CPU != nil {
		wg.Go(func() { res.ServerCPU, cpuErr = measureCPU(cfg.CPU, clk) })
	}
	for i, c := range cs {
		c.clk = clk
		wg.Go(func() {
			if n := len(cfg.ClientCPUs); n > 0 {
				unpin, err := cpupin.Pin(cfg.ClientCPUs[i%n])
				if err != nil {
					c.pinErr = fmt.Errorf("kvload: client %d: %w", i, err)
					return
				}
				defer unpin()
			}
			switch {
			case depth > 1 && arr != nil:
				c.openAsync(arr, depth)
			case depth > 1:
				c.closedAsync(depth)
			case arr != nil:
				c.openSync(arr)
			default:
				c.closedSync()
			}
		})
	}
	wg.Wait()
	closeAll()
	for _, c := range cs {
		if c.pinErr != nil {
			return nil, c.pinErr
		}
		res.merge(c.res)
	}
	res.Seconds = cfg.Duration.Seconds()
	res.Offered = cfg.Rate
	if cpuErr != nil {
		return nil, fmt.Errorf("kvload: serving side's CPU: %w", cpuErr)
	}
	return res, nil
}

// measureCPU returns the CPU time m's processes use during clk's
// measurement (sleeping to its start and end: 1 ms late at most, against
// a measurement of seconds).
func measureCPU(m *CPUMeter, clk *clock) (time.Duration, error) {
	time.Sleep(clk.warm - clk.now())
	if err := m.Start(); err != nil {
		return 0, err
	}
	time.Sleep(clk.end - clk.now())
	return m.Stop()
}
