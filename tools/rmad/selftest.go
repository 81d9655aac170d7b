package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/opgen"
	"github.com/onerma/onerma/engine/port/dpdkport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/internal/pattern"
	"github.com/onerma/onerma/internal/tsc"
	"github.com/onerma/onerma/keyx"
)

// selfTestOptions are the flags of rmad -selftest: the engine's own op
// generator (opgen.SelfTest), testpmd's forwarding modes for 1RMA. Every
// polling core posts ops itself, checks each one's data, and rmad prints
// the result and exits: 0 only when every op completed OK and checked.
type selfTestOptions struct {
	test        string // read_bw, write_bw, read_lat
	size        int
	depth       int
	dur, warm   time.Duration
	peer        string // key service HOST:PORT of the peer region's owner ("": this engine's own region)
	region      string
	credsDir    string
	credsFD     int
	regionBytes uint64
	handOver    bool
	json        bool
	profile     bool
}

// selfTestFlags are the flags that mean something only with -selftest
// (canonical names).
var selfTestFlags = []string{"s", "O", "D", "warmup", "selftest-peer", "selftest-region", "creds",
	"creds-fd", "selftest-region-bytes", "selftest-handover", "json", "profile"}

// flags registers the -selftest flags. They are rmaperf's where rmaperf
// has them (-s, -O, -D, -warmup, -creds, -creds-fd, -json); the old
// -selftest-warmup, -selftest-creds, -selftest-creds-fd and -selftest-json
// stay as aliases.
func (o *selfTestOptions) flags(fs *cli.FlagSet) {
	fs.StringVar(&o.test, "selftest", "", "run the engine's own op generator and exit: read_bw, write_bw or read_lat (every polling core posts and checks ops; exit status 0 only if all completed OK and checked)")
	fs.IntVar(&o.size, "s", 64, "-selftest: bytes per op (1..4096)")
	fs.IntVar(&o.depth, "O", 64, "-selftest: ops each polling core keeps in flight (read_lat: 1)")
	fs.DurationVar(&o.dur, "D", 5*time.Second, "-selftest: measured duration")
	fs.DurationVar(&o.warm, "warmup", 500*time.Millisecond, "-selftest: ops before the measurement (checked, not counted)")
	fs.StringVar(&o.peer, "selftest-peer", "", "-selftest: target a peer engine's region: the HOST:PORT of its owner's key service (rmaperf server), which grants this engine's K_d; \"\": a region of this engine, through its port (-hairpin-self=true) or inside each core")
	fs.StringVar(&o.region, "selftest-region", "", "-selftest-peer: the region's id (as rmaperf server prints it)")
	fs.StringVar(&o.credsDir, "creds", "", "-selftest-peer: directory of the client's TLS credentials (DIR/client.pem, from rmactl creds)")
	fs.IntVar(&o.credsFD, "creds-fd", -1, "-selftest-peer: inherited descriptor carrying the client's TLS credentials (from a launcher)")
	fs.Uint64Var(&o.regionBytes, "selftest-region-bytes", 0, "-selftest on this engine's region: its size (0: 1 MB, or what the WRITEs in flight need)")
	fs.BoolVar(&o.handOver, "selftest-handover", false, "-selftest: only the cores whose requests another core serves post ops, so every answer crosses a hand-over ring (memif, net_ring loopback: -cores 2 or more)")
	fs.BoolVar(&o.json, "json", false, "-selftest: print one JSON line (the benchmark row) instead of the table")
	fs.BoolVar(&o.profile, "profile", false, "-selftest: count every core's cycles by stage of the data path (receive, open, protocol, build, seal, transmit, completion, the loop's overhead) over the measured window and print them per op beside a budget from the speed targets and the run's measured crypto cost (with -json: in the row's \"stages\")")
	fs.Alias("selftest-warmup", "warmup")
	fs.Alias("selftest-creds", "creds")
	fs.Alias("selftest-creds-fd", "creds-fd")
	fs.Alias("selftest-json", "json")
}

// check refuses -selftest flags given without -selftest, and bad values.
func (o *selfTestOptions) check(fs *cli.FlagSet) error {
	var given []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(selfTestFlags, fs.Canonical(f.Name)) {
			given = append(given, "-"+f.Name)
		}
	})
	if o.test == "" {
		if len(given) > 0 {
			return fmt.Errorf("%s need -selftest", strings.Join(given, ", "))
		}
		return nil
	}
	switch o.test {
	case "read_bw", "write_bw":
	case "read_lat":
		o.depth = 1
	default:
		return fmt.Errorf("-selftest %q: want read_bw, write_bw or read_lat", o.test)
	}
	switch {
	case o.size < 1 || o.size > abi.MaxOpBytes:
		return fmt.Errorf("-s %d: want 1..%d", o.size, abi.MaxOpBytes)
	case o.depth < 1:
		return fmt.Errorf("-O %d: want at least 1", o.depth)
	case o.dur <= 0 || o.warm < 0:
		return fmt.Errorf("-D %v, -warmup %v: want a positive duration and a warm-up of 0 or more", o.dur, o.warm)
	case o.peer == "" && (o.region != "" || o.credsDir != "" || o.credsFD >= 0):
		return errors.New("-selftest-region, -creds and -creds-fd need -selftest-peer")
	case o.peer != "" && o.regionBytes != 0:
		return errors.New("-selftest-region-bytes sizes this engine's own region: not with -selftest-peer")
	case o.peer != "" && (o.credsDir != "") == (o.credsFD >= 0):
		return errors.New("-selftest-peer needs TLS credentials: -creds DIR (DIR/client.pem) or -creds-fd FD, one of the two")
	case o.profile && o.handOver:
		return errors.New("-profile counts the cycles of the cores that post ops: not with -selftest-handover, where others serve them")
	}
	if o.peer != "" {
		if _, err := strconv.ParseUint(o.region, 0, 32); err != nil {
			return fmt.Errorf("-selftest-peer needs -selftest-region (the id its owner printed): %q: %v", o.region, err)
		}
	}
	return nil
}

func (o *selfTestOptions) op() abi.Op {
	if o.test == "write_bw" {
		return abi.OpWrite
	}
	return abi.OpRead
}

// selfTestRun is one -selftest run of this engine.
type selfTestRun struct {
	o      *selfTestOptions
	st     *opgen.SelfTest
	target string // where the ops go, for the report
	cores  int
	// -profile: each core's cost accounting (nil without), the engine's
	// MTU and seal backend (its crypto cost is measured after the run).
	stages []*stage.Stages
	mtu    int
	crypto string
}

// newSelfTest attaches the op generator to g's cores (before they run):
// to a region of this engine, filled with the pattern, or to the peer's
// region whose K_d (for this engine's address and engine.SelfTestPID)
// its owner's key service grants.
func newSelfTest(ctx context.Context, o *selfTestOptions, g *engine.Group, ec *engine.Config, log zerolog.Logger) (*selfTestRun, error) {
	cores := g.Len()
	cfg := opgen.Config{Op: o.op(), Size: o.size, Outstanding: o.depth, Warmup: o.warm, Duration: o.dur, HandOver: o.handOver}
	r := &selfTestRun{o: o, cores: cores, mtu: ec.MTU, crypto: cmp.Or(ec.Crypto, engine.CryptoGo)}
	if o.profile {
		r.stages = newStages(cores)
		cfg.Stages = r.stages
		for i, s := range r.stages {
			g.Core(i).SetStages(s)
		}
	}
	if o.handOver && cores < 2 {
		return nil, errors.New("-selftest-handover needs two polling cores or more (-cores, -cpu)")
	}
	if o.peer == "" {
		if o.handOver && !ec.HairpinSelf {
			return nil, errors.New("-selftest-handover on this engine's own region needs -hairpin-self=true: frames to itself must cross the port (inside a core nothing is handed over)")
		}
		n := o.regionBytes
		if n == 0 {
			stride := uint64(o.size+63) &^ 63
			n = max(1<<20, 2*uint64(cores*o.depth)*stride)
		}
		mem := make([]byte, n)
		pattern.Fill(mem, 0)
		cfg.Target.Mem = mem
		r.target = "this engine's own, inside each core"
		if ec.HairpinSelf {
			r.target = "this engine's own, out of the port and back"
		}
	} else {
		if err := r.fetchKeys(ctx, &cfg, ec.LocalIP); err != nil {
			return nil, err
		}
		r.target = fmt.Sprintf("the engine at %v's (K_d from %s)", cfg.Target.Addr, o.peer)
	}
	st, err := opgen.New(g, cfg)
	if err != nil {
		return nil, err
	}
	r.st = st
	log.Info().Str("test", o.test).Int("size", o.size).Int("outstanding", o.depth).Stringer("duration", o.dur).Stringer("warmup", o.warm).
		Int("cores", cores).Int("initiating_cores", st.Initiators()).Bool("handover", o.handOver).
		Str("target", r.target).Uint32("region", uint32(st.Region())).Msg("self-test attached")
	return r, nil
}

// fetchKeys asks the peer region's owner for this engine's K_d: READ
// (the READs, or the read-back of WRITEs) and, for WRITEs, WRITE.
func (r *selfTestRun) fetchKeys(ctx context.Context, cfg *opgen.Config, self netip.Addr) error {
	o := r.o
	var (
		creds *keyx.Credentials
		err   error
	)
	if o.credsDir != "" {
		creds, err = keyx.LoadClient(o.credsDir)
	} else {
		creds, err = keyx.Inherited(o.credsFD)
	}
	if err != nil {
		return fmt.Errorf("-selftest-peer credentials: %w", err)
	}
	rid, _ := strconv.ParseUint(o.region, 0, 32) // checked with the flags
	ops := []abi.Op{abi.OpRead}
	if cfg.Op == abi.OpWrite {
		ops = append(ops, abi.OpWrite)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // Fetch retries while the owner starts
	defer cancel()
	for _, op := range ops {
		g, err := keyx.Fetch(ctx, o.peer, creds, keyx.Request{Initiator: self, PID: engine.SelfTestPID, Region: abi.RegionID(rid), Op: op})
		if err != nil {
			return fmt.Errorf("key exchange with %s: %w", o.peer, err)
		}
		t := &cfg.Target
		t.Addr, t.Region, t.Bytes = g.Owner, g.Region, g.Bytes
		if op == abi.OpRead {
			t.ReadKey = g.Key
		} else {
			t.WriteKey = g.Key
		}
		clear(g.Key[:])
	}
	if cfg.Op == abi.OpRead { // the owner's region holds the pattern (rmaperf server)
		cfg.Target.Expect = make([]byte, cfg.Target.Bytes/2)
		pattern.Fill(cfg.Target.Expect, 0)
	}
	return nil
}

// errSelfTestFailed: the run ended, and not every op completed OK and
// checked (the report says which failed first).
var errSelfTestFailed = errors.New("self-test failed")

// run starts the generator once the port's link is up, waits until every
// core has finished, and prints the report to w.
func (r *selfTestRun) run(ctx context.Context, port dpdk.PortID, rs []*runner.Runner, q *dpdkport.Queues, w io.Writer, log zerolog.Logger) error {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l, err := port.Link()
		if err == nil && l.Up {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("-selftest: the port's link is not up after 10 s (%v)", err)
		}
	}
	ref := tsc.Now()
	r.st.Start()
	finished := r.wait(ctx, rs, log)
	hz := ref.Hz()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("-selftest: interrupted: %w", err)
	}
	// Every core's result and port counters: once every core has
	// finished, read on each core's loop; otherwise with the loops
	// stopped (unfinished cores say so).
	var res opgen.Result
	ports := make([]dpdkport.Stats, len(rs))
	if finished {
		for i, rn := range rs {
			if err := rn.Exec(func(*engine.Core) { ports[i] = q.Ports[i].Stats() }); err != nil {
				return err
			}
		}
	} else {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, rn := range rs {
			rn.Stop(stopCtx)
		}
		cancel()
		for i := range rs {
			ports[i] = q.Ports[i].Stats()
		}
	}
	res = r.st.Result()
	var prof *stage.Report
	if r.stages != nil && finished {
		sum := res.Sum()
		var err error
		if prof, err = r.profileReport(rs[0].Exec, sum.Stages, sum.Ops, hz); err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
	} else if r.stages != nil {
		log.Error().Msg("-profile: no stage table: the run did not finish")
	}
	if err := r.report(w, &res, ports, prof); err != nil {
		return err
	}
	if !res.OK() {
		log.Error().Str("failure", res.Failure()).Msg("self-test failed")
		return errSelfTestFailed
	}
	return nil
}

// wait waits until every core has finished (true), or until 30 s past
// the run's end, ctx's end or a loop's exit (false).
func (r *selfTestRun) wait(ctx context.Context, rs []*runner.Runner, log zerolog.Logger) bool {
	limit := time.NewTimer(r.o.warm + r.o.dur + 30*time.Second)
	defer limit.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !r.st.Done() {
		select {
		case <-ctx.Done():
			return false
		case <-anyDone(rs):
			log.Error().Msg("self-test: a poll loop exited")
			return false
		case <-limit.C:
			log.Error().Msg("self-test not finished 30 s after its end: reporting what finished")
			return false
		case <-tick.C:
		}
	}
	return true
}

// profiledRow is the -json row with -profile: the benchmark row and the
// stage table (rmabench stores the table as rows of its own).
type profiledRow struct {
	benchrow.Row
	Stages *stage.Report `json:"stages,omitempty"`
}

// report prints the result: rmaperf's columns, a row per core and their
// sum, and the hand-over counters of each core's port, then prof (-profile)
// when there is one; or with -json the sum as one benchmark row carrying
// prof.
func (r *selfTestRun) report(w io.Writer, res *opgen.Result, ports []dpdkport.Stats, prof *stage.Report) error {
	o := r.o
	sum := res.Sum()
	var handedOut, handedIn, full uint64
	for _, p := range ports {
		handedOut, handedIn, full = handedOut+p.HandedOut, handedIn+p.HandedIn, full+p.HandOverFull
	}
	if o.json {
		row := r.row(&sum, r.st.Initiators())
		row.Note = fmt.Sprintf("handed over: out %d, in %d, lost %d", handedOut, handedIn, full)
		if f := res.Failure(); f != "" {
			row.Note = f + "; " + row.Note
		}
		return json.NewEncoder(w).Encode(profiledRow{Row: row, Stages: prof})
	}
	fmt.Fprintf(w, "rmad selftest %s: %d B ops, %d in flight per core, %d of %d cores posting; %v measured after %v of warm-up\n",
		o.test, o.size, o.depth, r.st.Initiators(), r.cores, o.dur, o.warm)
	fmt.Fprintf(w, "target: region %#x of %d bytes, %s\n", uint32(r.st.Region()), r.st.RegionBytes(), r.target)
	fmt.Fprintf(w, "%-5s %-9s %6s %4s %12s %12s %10s %9s %9s %9s %8s %11s %10s\n",
		"core", "test", "size", "O", "ops", "ops/s", "MB/s", "p50_us", "p99_us", "p99.9_us", "errors", "handed_out", "handed_in")
	line := func(name string, c *opgen.CoreResult, depth int, p dpdkport.Stats) {
		row := r.row(c, 1)
		fmt.Fprintf(w, "%-5s %-9s %6d %4d %12d %12.0f %10.1f %9.2f %9.2f %9.2f %8d %11d %10d\n",
			name, o.test, o.size, depth, c.Ops, row.OpsPerSec, row.MBPerSec, row.P50us, *row.P99us, *row.P999us,
			c.Errors+c.Mismatches, p.HandedOut, p.HandedIn)
	}
	for i := range res.Cores {
		c := &res.Cores[i]
		depth := 0
		if c.Initiator {
			depth = o.depth
		}
		line(strconv.Itoa(i), c, depth, ports[i])
	}
	line("all", &sum, o.depth*r.st.Initiators(), dpdkport.Stats{HandedOut: handedOut, HandedIn: handedIn})
	what := "READ data against the region's bytes"
	switch {
	case o.op() == abi.OpWrite && o.peer == "":
		what = "WRITEs in the region as each completed"
	case o.op() == abi.OpWrite:
		what = fmt.Sprintf("WRITEs acknowledged, the last of each slot read back: %d", sum.ReadBacks)
	}
	fmt.Fprintf(w, "checked: %d of %d ops (%s); %d errors, %d mismatches; hand-over ring full %d\n",
		sum.Verified, sum.Posted, what, sum.Errors, sum.Mismatches, full)
	if prof != nil {
		prof.Fprint(w)
	}
	if res.OK() {
		fmt.Fprintln(w, "selftest: PASS")
	} else {
		fmt.Fprintln(w, "selftest: FAIL:", cmp.Or(res.Failure(), "no core posted an op"))
	}
	return nil
}

// row is c as a benchmark row (rmaperf's record): rates over its window,
// latencies of the ops in it (post to completion, in the engine).
func (r *selfTestRun) row(c *opgen.CoreResult, initiators int) benchrow.Row {
	secs := float64(c.WindowNs) / 1e9
	us := func(q float64) float64 { return float64(c.Latency.Quantile(q)) / 1e3 }
	row := benchrow.Row{
		System: "onerma", Test: r.o.test, Size: r.o.size, Outstanding: r.o.depth * initiators, Cores: r.cores,
		P50us: us(0.5), P99us: benchrow.F(us(0.99)), P999us: benchrow.F(us(0.999)),
		EngP50us: benchrow.F(us(0.5)), EngP99us: benchrow.F(us(0.99)), EngP999us: benchrow.F(us(0.999)),
		EngMaxUs: benchrow.F(float64(c.Latency.Max()) / 1e3),
		Ops:      c.Ops, Errors: c.Errors + c.Mismatches, Seconds: secs,
	}
	if secs > 0 {
		row.OpsPerSec = float64(c.Ops) / secs
		row.MBPerSec = row.OpsPerSec * float64(r.o.size) / 1e6
	}
	return row
}
