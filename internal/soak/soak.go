package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onerma/onerma/keyx"
)

// Config configures a run.
type Config struct {
	Duration time.Duration // of the load (set-up and the checks at the end come on top)
	Bin      string        // directory holding rmad and rmactl
	Dir      string        // engines' sockets, logs and IV state ("": a temporary directory)
	Prefix   string        // network namespaces' prefix ("": soak<pid>)
	Log      io.Writer     // progress lines (nil: none)
	// Rate paces the raw ops, in ops a second over all engines (0:
	// DefaultRate; negative: as fast as they complete).
	Rate float64
	// ExecRate paces the executor transfers, in bytes a second written
	// and read back over all engines (0: DefaultExecRate; negative: as
	// fast as they go).
	ExecRate float64
	// Profiles writes heap profiles and memory maps of every engine to
	// Dir (which must be set): before any application ("start"), at the
	// end of each incarnation's warm-up ("warm"), half-way ("half"), when
	// the load has stopped ("end") and once the applications closed
	// ("closed"). The engines then sample their allocations (rmad
	// -metrics-pprof), whose records the Go runtime keeps, and each
	// profile forces a collection: their memory is not quite what it
	// would be, and its check tells less.
	Profiles bool
}

// The default load: raw ops at twice the rate of the verified-ops floor
// (10 M per 30 minutes), and executor transfers moving as many 4 KB
// chunks again, so that the raw ops alone make the floor with room for
// faults. Unpaced, the four engines, their router and this process take
// most of a 2-CPU host (bench/RESULTS.md, soak), and under other load
// engines starved of CPU for seconds time out ops outside any fault.
const (
	DefaultRate     = 2 * 10e6 / 1800
	DefaultExecRate = 10e6 / 1800 * blockBytes
)

// soak is one run.
type soak struct {
	cfg    Config
	bed    *bed
	creds  *keyx.Credentials // readers' (client) credentials
	owners []*owner
	raw    []*worker
	exec   []*execWorker
	faults faults
	errs   errorLog
	nonces *nonceSet
	cap    *capture

	t0       time.Time // the load's start
	stopping atomic.Bool
	verified atomic.Uint64 // verified ops and transfers so far (progress)

	rmu   sync.Mutex
	recon []int // applications reconnected, per engine
	rcond *sync.Cond

	stallLog
	rekeys rekeyCounts
	kills  atomic.Int32
	flaps  atomic.Int32
}

// since is t as an offset from the start of the load, for messages.
func (s *soak) since(t time.Time) time.Duration { return t.Sub(s.t0).Round(time.Millisecond) }

func (s *soak) logf(format string, args ...any) {
	if s.cfg.Log != nil {
		fmt.Fprintf(s.cfg.Log, "soak: "+format+"\n", args...)
	}
}

// reconnected records that an application on engine i reconnected.
func (s *soak) reconnected(i int) {
	s.rmu.Lock()
	s.recon[i]++
	s.rmu.Unlock()
	s.rcond.Broadcast()
}

// awaitReconnects waits until n applications on engine i have
// reconnected in all, or d has passed.
func (s *soak) awaitReconnects(i, n int, d time.Duration) bool {
	t := time.AfterFunc(d, s.rcond.Broadcast)
	defer t.Stop()
	deadline := time.Now().Add(d)
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for s.recon[i] < n {
		if time.Now().After(deadline) {
			return false
		}
		s.rcond.Wait()
	}
	return true
}

// Run runs the soak and returns its report; the report's OK says whether
// every floor and check held. An error means the run could not be made
// (the testbed did not come up), not that a check failed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Duration < 30*time.Second {
		return nil, fmt.Errorf("soak: duration %v: want at least 30s", cfg.Duration)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = fmt.Sprintf("soak%d", os.Getpid()%100000)
	}
	keep := cfg.Dir != ""
	if cfg.Profiles && !keep {
		return nil, errors.New("soak: heap profiles need a directory to go to")
	}
	if !keep {
		d, err := os.MkdirTemp("", "onerma-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		cfg.Dir = d
	}
	s := &soak{cfg: cfg, recon: make([]int, engines)}
	s.rcond = sync.NewCond(&s.rmu)
	load0 := loadAvg()
	profDir := ""
	if cfg.Profiles {
		profDir = cfg.Dir
	}
	b, err := newBed(cfg.Prefix, cfg.Bin, cfg.Dir, profDir)
	if err != nil {
		return nil, err
	}
	s.bed = b
	defer b.Close()
	var addrs []netip.Addr
	for _, h := range b.Hosts {
		addrs = append(addrs, h.Addr)
	}
	s.nonces = newNonceSet(addrs)
	var bridges []string
	for _, sn := range b.Subnets {
		bridges = append(bridges, sn.Bridge)
	}
	// The capture starts before the first engine sends its first frame.
	if s.cap, err = openCapture(b.Router, bridges, s.nonces); err != nil {
		return nil, err
	}
	capStopped := false
	defer func() {
		if !capStopped {
			s.cap.Stop()
		}
	}()
	for i := range b.Hosts {
		if err := b.start(i); err != nil {
			b.stop()
			return nil, err
		}
	}
	s.profileAll("start")
	if err := s.openApps(); err != nil {
		s.closeApps()
		b.stop()
		return nil, err
	}
	s.logf("%d engines up (%s), load %.2f; %v of load with faults", len(b.Hosts), b.describe(), load0, cfg.Duration)

	t0 := time.Now()
	s.t0 = t0
	floors := FloorsFor(cfg.Duration)
	hard, cancel := context.WithDeadline(ctx, t0.Add(cfg.Duration+5*time.Minute))
	defer cancel()
	var wg sync.WaitGroup
	werrs := make([]error, 2*engines)
	for i := range engines {
		wg.Add(2)
		go func() { defer wg.Done(); werrs[i] = s.raw[i].run(hard) }()
		go func() { defer wg.Done(); werrs[engines+i] = s.exec[i].run(hard) }()
	}
	samplerDone := make(chan struct{})
	go s.sample(t0, samplerDone)
	stallsDone := make(chan struct{})
	stallsEnded := make(chan struct{})
	go func() { s.watchStalls(stallsDone); close(stallsEnded) }()
	schedErr := s.schedule(hard, t0, plan(cfg.Duration, floors))
	if d := time.Until(t0.Add(cfg.Duration)); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	elapsed := time.Since(t0)
	s.stopping.Store(true)
	wg.Wait()
	close(samplerDone)
	close(stallsDone)
	<-stallsEnded
	s.faults.settle(&s.errs)
	s.logf("load stopped after %v; quiescing", elapsed.Round(time.Second))

	rep := &Report{Planned: cfg.Duration, Duration: elapsed, Floors: floors, LoadStart: load0, Hosts: b.describe()}
	rep.addErr(schedErr)
	for _, err := range werrs {
		rep.addErr(err)
	}
	// Quiet for longer than any op can take: then nothing is in flight.
	time.Sleep(2 * engineTimeout)
	s.profileAll("end")
	rep.Leaks = s.checkHoldings(true, rep)
	s.collect(rep)
	rep.addErr(s.closeApps())
	time.Sleep(200 * time.Millisecond)
	rep.Leaks = append(rep.Leaks, s.checkHoldings(false, rep)...)
	s.profileAll("closed")
	rep.LoadEnd = loadAvg()
	if keep {
		b.mu.Lock()
		rep.addErr(writeRSS(filepath.Join(cfg.Dir, "rss.tsv"), b.tracks))
		b.mu.Unlock()
	}
	rep.addErr(b.stop())
	capStopped = true
	rep.addErr(s.cap.Stop())
	s.collectCapture(rep)
	rep.judge(s)
	return rep, nil
}

// openApps starts every engine's applications: its owner (regions and
// key service), its raw worker and its executor.
func (s *soak) openApps() error {
	server, client, err := keyx.NewPair("onerma-soak", 24*time.Hour)
	if err != nil {
		return err
	}
	s.creds = client
	// The readers' one certificate, granted every op for the engines'
	// addresses.
	permit := keyx.Permit{Client: client.Name(), Ops: keyx.Read | keyx.Write | keyx.Rekey}
	for _, h := range s.bed.Hosts {
		permit.Addrs = append(permit.Addrs, netip.PrefixFrom(h.Addr, 32))
	}
	for i := range engines {
		o, err := newOwner(i, s.bed.socket(i), server, []keyx.Permit{permit})
		if err != nil {
			return err
		}
		s.owners = append(s.owners, o)
	}
	rate, xrate := s.cfg.Rate, s.cfg.ExecRate
	if rate == 0 {
		rate = DefaultRate
	}
	if xrate == 0 {
		xrate = DefaultExecRate
	}
	for i := range engines {
		w, err := newWorker(s, i, rate/engines)
		if err != nil {
			return err
		}
		s.raw = append(s.raw, w)
		x, err := newExecWorker(s, i, xrate/engines)
		if err != nil {
			return err
		}
		s.exec = append(s.exec, x)
	}
	return nil
}

// closeApps closes every application: the engines reclaim their portals.
func (s *soak) closeApps() error {
	var errs []error
	for _, x := range s.exec {
		errs = append(errs, x.close())
	}
	for _, w := range s.raw {
		errs = append(errs, w.p.Close())
	}
	for _, o := range s.owners {
		errs = append(errs, o.close())
	}
	s.exec, s.raw, s.owners = nil, nil, nil
	return errors.Join(errs...)
}

// sample reads the engines' memory now and then, and logs progress. With
// a profile directory it takes a heap profile of each incarnation at the
// end of its warm-up ("warm") and of every engine half-way through the
// load ("half").
func (s *soak) sample(t0 time.Time, done chan struct{}) {
	every := min(max(s.cfg.Duration/360, time.Second), 5*time.Second)
	logEvery := min(max(s.cfg.Duration/12, 10*time.Second), time.Minute)
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastLog := t0
	warm := rssWarm(s.cfg.Duration)
	warmed := map[[2]int]bool{} // engine, incarnation
	half := false
	for {
		s.bed.sampleRSS()
		if s.bed.profDir != "" {
			for i := range engines {
				s.bed.mu.Lock()
				inc, age := s.bed.inc[i], time.Since(s.bed.started[i])
				s.bed.mu.Unlock()
				if k := [2]int{i, inc}; age >= warm && !warmed[k] {
					warmed[k] = true
					s.profile(i, "warm")
				}
			}
			if !half && time.Since(t0) >= s.cfg.Duration/2 {
				half = true
				s.profileAll("half")
			}
		}
		if time.Since(lastLog) >= logEvery {
			lastLog = time.Now()
			n, _ := s.errs.snapshot()
			s.logf("%v: %d verified, %d errors, %d kills, %d flaps, %d+%d rekeys, load %.2f",
				time.Since(t0).Round(time.Second), s.verified.Load(), n, s.kills.Load(), s.flaps.Load(),
				s.rekeys.local.Load(), s.rekeys.remote.Load(), loadAvg())
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

// profileAll takes a heap profile of every engine (bed.profile).
func (s *soak) profileAll(tag string) {
	for i := range engines {
		s.profile(i, tag)
	}
}

// profile takes a heap profile of engine i; one that cannot be taken
// (the engine is being restarted) is logged, not counted as an error.
func (s *soak) profile(i int, tag string) {
	if err := s.bed.profile(i, tag); err != nil {
		s.logf("%v", err)
	}
}

// loadAvg is the host's one-minute load average (0 if unreadable).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}
