package sim

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

var (
	flagSeeds  = flag.Int("sim.seeds", 0, "seeds per scenario (0: a few, the default for go test)")
	flagSeed   = flag.Uint64("sim.seed", 0, "run only this seed (of every scenario -run selects); 0: unset")
	flagBase   = flag.Uint64("sim.base", 1, "first seed of the range run")
	flagRandom = flag.Bool("sim.random", false, "start the range at a random seed (printed)")
	flagJobs   = flag.Int("sim.jobs", 0, "seeds run in parallel (0: GOMAXPROCS); each run is single-goroutine")
)

// defaultSeeds per scenario keeps plain `go test ./engine/sim` short.
const defaultSeeds = 3

// seedsFor returns the seeds to run.
func seedsFor(t *testing.T) []uint64 {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}
	}
	n := *flagSeeds
	if n <= 0 {
		n = defaultSeeds
		if testing.Short() {
			n = 1
		}
	}
	b := *flagBase
	if *flagRandom {
		b = uint64(time.Now().UnixNano())&(1<<40-1) | 1
	}
	if *flagRandom || n > defaultSeeds {
		t.Logf("seeds %d..%d", b, b+uint64(n)-1)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = b + uint64(i)
	}
	return out
}

// runSeeds runs mk(seed) for every seed on a few workers (each run is
// deterministic and single-goroutine) and returns the results in seed
// order, and the failure of the lowest failing seed.
func runSeeds(seeds []uint64, mk func(uint64) Config) ([]*Result, uint64, error) {
	jobs := *flagJobs
	if jobs <= 0 {
		jobs = runtime.GOMAXPROCS(0)
	}
	res := make([]*Result, len(seeds))
	errs := make([]error, len(seeds))
	var mu sync.Mutex
	failed := false
	next := 0
	var wg sync.WaitGroup
	for range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if failed || next == len(seeds) {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				r, err := Run(mk(seeds[i]))
				res[i], errs[i] = r, err
				if err != nil {
					mu.Lock()
					failed = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return res, seeds[i], err
		}
	}
	return res, 0, nil
}

// report fails t with the failure, replayed with tracing on so the
// message shows the events that led to it.
func report(t *testing.T, sc Scenario, seed uint64, err error) {
	t.Helper()
	cfg := sc.Make(seed)
	cfg.Trace = true
	_, err2 := Run(cfg)
	var f *Failure
	if errors.As(err2, &f) {
		err = err2
	}
	t.Fatalf("%v\nreproduce with: go test ./engine/sim -run 'TestSimSeeds/%s$' -sim.seed=%d", err, sc.Name, seed)
}

// TestSimSeeds runs every scenario over a range of seeds. Thousands:
//
//	go test ./engine/sim -run TestSimSeeds -sim.seeds=5000
//	go test ./engine/sim -run TestSimSeeds/incast -sim.seed=42
func TestSimSeeds(t *testing.T) {
	for _, sc := range Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			seeds := seedsFor(t)
			res, seed, err := runSeeds(seeds, sc.Make)
			if err != nil {
				report(t, sc, seed, err)
			}
			var by, wby, kby [abi.NumStatus]uint64
			var rekeyOps, remoteRekeys, orphanRekeys, toRekeyed uint64
			var rkinds [24]uint64
			var kinds, wkinds [24]uint64
			var writes, commits, orphanCommits, toCommitted, readsW, readsMixed uint64
			var posted, steps, rekeys, zeroed, authDamaged, crossCore uint64
			var covered [abi.NumStatus]int // seeds in which each status occurred
			var net NetStats
			var cs engineTotals
			for _, r := range res {
				cs.add(r)
				posted += r.Posted
				steps += r.Steps
				rekeys += r.Rekeys
				zeroed += r.ZeroedSinks
				authDamaged += r.AuthFailDamaged
				for i, v := range r.ByStatus {
					by[i] += v
					if v > 0 {
						covered[i]++
					}
				}
				for i, v := range r.ByKind {
					kinds[i] += v
				}
				for i, v := range r.WriteKinds {
					wkinds[i] += v
				}
				for i, v := range r.WriteStatus {
					wby[i] += v
				}
				writes += r.Writes
				rekeyOps += r.RekeyOps
				remoteRekeys += r.RemoteRekeys
				orphanRekeys += r.OrphanRekeys
				toRekeyed += r.TimeoutRekeyed
				for i, v := range r.RekeyStatus {
					kby[i] += v
				}
				for i, v := range r.RekeyKinds {
					rkinds[i] += v
				}
				commits += r.WritesCommitted
				orphanCommits += r.OrphanCommits
				toCommitted += r.TimeoutCommitted
				readsW += r.ReadsOfWritten
				readsMixed += r.ReadsMixed
				net.Sent += r.Net.Sent
				net.Dropped += r.Net.Dropped
				net.Corrupted += r.Net.Corrupted
				net.Duplicated += r.Net.Duplicated
				net.Reordered += r.Net.Reordered
				net.DownQueueDrops += r.Net.DownQueueDrops
				net.LinkDrops += r.Net.LinkDrops
				net.Straggled += r.Net.Straggled
				net.Misaddressed += r.Net.Misaddressed
				net.HandedOver += r.Net.HandedOver
				net.HandoverDrops += r.Net.HandoverDrops
				crossCore += r.CrossCore
			}
			t.Logf("%d seeds: %d ops, %d steps; completions: %s; frames sent %d, dropped %d, corrupted %d, dup %d, reordered %d, straggled %d, queue drops %d, link drops %d; cores: %s",
				len(seeds), posted, steps, statusSummary(&by), net.Sent, net.Dropped, net.Corrupted, net.Duplicated,
				net.Reordered, net.Straggled, net.DownQueueDrops, net.LinkDrops, cs)
			if net.HandedOver > 0 || crossCore > 0 {
				t.Logf("cores: frames handed over %d (dropped %d), READ data served from another core's region %d", net.HandedOver, net.HandoverDrops, crossCore)
			}
			if strings.HasPrefix(sc.Name, "multicore") && len(seeds) >= defaultSeeds && (net.HandedOver == 0 || crossCore == 0 || rekeys == 0) {
				t.Errorf("handed over %d frames, served %d READ chunks from another core's regions, %d rekeys: the scenario did not exercise engines of several cores",
					net.HandedOver, crossCore, rekeys)
			}
			t.Logf("keys: %d rekeys; wrong-key ops %d (random %d, other initiator %d, other op %d), stale-key ops %d, remote-region ops %d; damaged requests answered auth failure %d (to damaged sources %d); failed reads with zeroed chunks %d",
				rekeys, kinds[kKeyRandom]+kinds[kKeyInitiator]+kinds[kKeyOp], kinds[kKeyRandom], kinds[kKeyInitiator], kinds[kKeyOp],
				kinds[kStaleKey], kinds[kRemoteRegion], authDamaged, net.Misaddressed, zeroed)
			t.Logf("writes: %d posted (%d valid, %d wrong-key, %d stale-key); completions: %s; commits seen %d (of orphans %d, then TIMEOUT %d); pulls issued %d, expired %d, committed %d; reads of written regions %d (chunks of several versions %d)",
				writes, wkinds[kValid], wkinds[kKeyRandom]+wkinds[kKeyInitiator]+wkinds[kKeyOp], wkinds[kStaleKey], statusSummary(&wby),
				commits, orphanCommits, toCommitted, cs.pullsIssued, cs.pullsExpired, cs.writesCommitted, readsW, readsMixed)
			t.Logf("remote REKEYs: %d posted (%d valid, %d remote-perm, %d wrong-key, %d stale-key); completions: %s; installs seen %d (engines: %d; of orphans %d, then TIMEOUT %d)",
				rekeyOps, rkinds[kValid], rkinds[kRemotePerm], rkinds[kKeyRandom]+rkinds[kKeyInitiator]+rkinds[kKeyOp], rkinds[kStaleKey],
				statusSummary(&kby), remoteRekeys, cs.remoteRekeys, orphanRekeys, toRekeyed)
			if h := sc.Make(seeds[0]).Hostile; h != nil {
				var hs HostileStats
				var nackedOwner, deferred, ivm, lanes, evictions uint64
				for _, r := range res {
					hs.Injected += r.Hostile.Injected
					hs.Pulls += r.Hostile.Pulls
					hs.Chunks += r.Hostile.Chunks
					st := r.Cores[h.Server]
					nackedOwner += st.ReqNackedOwner
					deferred += st.PullsDeferredOwner
					ivm += st.ReqIVMismatch
					lanes += st.ReplayLanesRefused
					evictions += st.ReplayEvictions
				}
				t.Logf("attacker: %d frames injected, %d pulls taken (%d answered with a chunk); server: %d NACKed at the owner's bound, %d writes deferred, %d forged IVs dropped, %d lanes refused, %d windows evicted",
					hs.Injected, hs.Pulls, hs.Chunks, nackedOwner, deferred, ivm, lanes, evictions)
			}
			checkCoverage(t, sc.Make(seeds[0]).Covers, &covered, len(seeds))
			if sc.Make(seeds[0]).flows != nil { // flows read; no random workload
				logShares(t, res)
				return
			}
			if len(seeds) >= defaultSeeds && (remoteRekeys == 0 || kby[abi.StatusOK] == 0 || cs.remoteRekeys != remoteRekeys) {
				t.Errorf("%d remote REKEYs installed (engines: %d), %d OK: the scenario did not exercise remote REKEYs", remoteRekeys, cs.remoteRekeys, kby[abi.StatusOK])
			}
			if len(seeds) >= defaultSeeds && (commits == 0 || wby[abi.StatusOK] == 0 || cs.writesCommitted != commits) {
				t.Errorf("%d writes committed (engines: %d), %d OK: the scenario did not exercise writes", commits, cs.writesCommitted, wby[abi.StatusOK])
			}
			if sc.Name == "corrupt" && len(seeds) >= defaultSeeds && net.Corrupted > 0 {
				// Damaged answers were dropped by authentication, damaged
				// requests answered REMOTE_AUTHENTICATION_FAILURE.
				if cs.rxAuthFailed == 0 || cs.reqAuthFailed == 0 || authDamaged == 0 {
					t.Errorf("%d frames corrupted, but RxAuthFailed %d, ReqAuthFailed %d, damaged requests answered REMOTE_AUTHENTICATION_FAILURE %d",
						net.Corrupted, cs.rxAuthFailed, cs.reqAuthFailed, authDamaged)
				}
			}
			if sc.Name == "clean" && len(seeds) >= defaultSeeds {
				// Every kind of bad command was posted (and, the run being
				// strict, got its precise status).
				for k := 1; k < NumKinds; k++ {
					if kinds[k] == 0 && opKind(k) != kStaleKey { // stale keys need a rekey and a reader in its window: TestRekey
						t.Errorf("no %s command was posted in %d seeds", KindName(k), len(seeds))
					}
					if wkinds[k] == 0 && opKind(k) != kStaleKey {
						t.Errorf("no %s WRITE was posted in %d seeds", KindName(k), len(seeds))
					}
				}
			}
		})
	}
}

// checkCoverage reports in how many of the seeds each status a scenario
// covers occurred, and fails when one occurred in none of them (with at
// least defaultSeeds seeds: a single replayed seed may miss one by chance).
func checkCoverage(t *testing.T, covers []abi.Status, covered *[abi.NumStatus]int, seeds int) {
	t.Helper()
	var b strings.Builder
	for _, st := range covers {
		fmt.Fprintf(&b, " %v %d/%d", st, covered[st], seeds)
	}
	t.Logf("coverage (seeds in which each status the scenario covers occurred):%s", b.String())
	if seeds < defaultSeeds {
		return
	}
	for _, st := range covers {
		if covered[st] == 0 {
			t.Errorf("no op completed with %v in %d seeds: the scenario did not exercise that mechanism", st, seeds)
		}
	}
}

// engineTotals sums the cores' counters that show which paths ran.
type engineTotals struct {
	rxAuthFailed, reqAuthFailed, rekeys, dropped, stale, dup, nacked, expired, txNoBuf, orphaned, arpReq, queueMax uint64
	pullsIssued, pullsExpired, writesCommitted, remoteRekeys                                                       uint64
}

func (e *engineTotals) add(r *Result) {
	for _, st := range append(r.Cores[:len(r.Cores):len(r.Cores)], r.Retired...) {
		e.rxAuthFailed += st.RxAuthFailed
		e.reqAuthFailed += st.ReqAuthFailed
		e.rekeys += st.Rekeys
		e.dropped += st.RxDropped
		e.stale += st.RxStale
		e.dup += st.RxDuplicate
		e.nacked += st.ReqNacked
		e.expired += st.ReqExpired
		e.txNoBuf += st.TxNoBuffer
		e.orphaned += st.Orphaned
		e.arpReq += st.ARPRequests
		e.queueMax = max(e.queueMax, st.ReqQueueMax)
		e.pullsIssued += st.PullsIssued
		e.pullsExpired += st.PullsExpired
		e.writesCommitted += st.WritesCommitted
		e.remoteRekeys += st.RemoteRekeys
	}
}

func (e engineTotals) String() string {
	return fmt.Sprintf("rx auth failed %d, rx dropped %d, stale %d, duplicate %d; requests auth failed %d, NACKed %d, expired %d, deepest queue %d; rekeys %d; tx no buffer %d; orphans %d; ARP requests %d",
		e.rxAuthFailed, e.dropped, e.stale, e.dup, e.reqAuthFailed, e.nacked, e.expired, e.queueMax, e.rekeys, e.txNoBuf, e.orphaned, e.arpReq)
}

// TestDeterminism: one seed run twice gives the same run, event for event.
func TestDeterminism(t *testing.T) {
	for _, sc := range Scenarios {
		cfg := sc.Make(7)
		a, errA := Run(cfg)
		b, errB := Run(sc.Make(7))
		if (errA == nil) != (errB == nil) {
			t.Fatalf("%s: one run failed, the other did not: %v / %v", sc.Name, errA, errB)
		}
		if a.Digest != b.Digest || a.Steps != b.Steps || a.ByStatus != b.ByStatus || a.Net != b.Net {
			t.Errorf("%s seed 7: runs differ: digest %x/%x steps %d/%d net %+v/%+v", sc.Name, a.Digest, b.Digest,
				a.Steps, b.Steps, a.Net, b.Net)
		}
	}
}

// TestSimCatchesForgedData checks the checker: responses altered in a way
// no integrity check can see must fail the run with the data invariant.
func TestSimCatchesForgedData(t *testing.T) {
	cfg := Clean(3)
	cfg.Net.Forge = 0.05
	cfg.ShutdownAtEnd = false
	_, err := Run(cfg)
	if err == nil || !strings.Contains(err.Error(), "corrupted data accepted") {
		t.Fatalf("forged responses: got %v, want a corrupted-data failure", err)
	}
}

// TestScenarioConfigs: every scenario builds valid configs.
func TestScenarioConfigs(t *testing.T) {
	for _, sc := range Scenarios {
		for seed := uint64(1); seed < 50; seed++ {
			c := sc.Make(seed)
			if err := c.Validate(); err != nil {
				t.Fatalf("%s seed %d: %v", sc.Name, seed, err)
			}
			e := c.Engine
			e.IV = aesni.NewVolatileIVSource(aesni.IVConfig{Block: c.IVBlock, Span: c.IVSpan})
			if err := e.Validate(); err != nil {
				t.Fatalf("%s seed %d engine: %v", sc.Name, seed, err)
			}
		}
	}
}

func ExampleRun() {
	res, err := Run(Clean(1))
	if err != nil {
		fmt.Println(err) // names the seed: reproduce with -sim.seed=1
		return
	}
	_ = res.ByStatus[abi.StatusOK]
}

// TestSimCatchesUnsteeredFrames checks the checker: on engines of several
// cores whose cores process whatever lands on their rx queue (no
// hand-over), answers reach cores that drop them and valid ops fail.
func TestSimCatchesUnsteeredFrames(t *testing.T) {
	cfg := MultiCoreClean(3)
	cfg.noHandOver = true
	if _, err := Run(cfg); err == nil {
		t.Fatal("a multi-core run without hand-over passed")
	}
	cfg.noHandOver = false
	if _, err := Run(cfg); err != nil {
		t.Fatal(err)
	}
}

// logShares reports what the tenant-shares runs measured.
func logShares(t *testing.T, res []*Result) {
	t.Helper()
	var maxWait, lightOps, borrowed, deadDT uint64
	var use, minUse float64 = 0, 2
	n := 0
	for _, r := range res {
		if r.Shares == nil {
			continue
		}
		st := r.Shares
		n++
		maxWait = max(maxWait, uint64(st.LightMaxWait))
		lightOps += st.LightOps
		borrowed += st.Borrowed
		deadDT += st.DeadShareDT
		use += st.WindowUse
		minUse = min(minUse, st.WindowUse)
	}
	if n == 0 {
		return
	}
	t.Logf("shares: %d runs; light ops %d, longest wait for service %dns; saturating tenant borrowed %d ops; dead destination's tenant DISPATCH_TIMEOUTs at its share %d; window use mean %.3f, lowest %.3f",
		n, lightOps, maxWait, borrowed, deadDT, use/float64(n), minUse)
}
