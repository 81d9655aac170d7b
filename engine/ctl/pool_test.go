package ctl

import (
	"flag"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The admission rule, case by case: a pool of 100 regions, guarantees of
// 10, quotas of 60, room kept for K = 2 tenants to come.
func TestPoolAdmission(t *testing.T) {
	p := &pool{id: poolRegions, total: 100, newcomers: 2, newcomerMin: 10}
	a, b := &share{min: 10, max: 60}, &share{min: 10, max: 60}
	for _, sh := range []*share{a, b} {
		if r := p.activate(sh); r != nil {
			t.Fatalf("activate: %+v", r)
		}
	}
	if p.unmet != 20 {
		t.Fatalf("unmet %d, want both guarantees", p.unmet)
	}
	// a grows to its quota: beyond its guarantee, 100-60 = 40 stay free
	// for b's 10 and 2 × 10 to come.
	for range 60 {
		if r := p.admit(a, 1); r != nil {
			t.Fatalf("a at %d: %+v", a.held, r)
		}
		p.take(a, 1)
	}
	r := p.admit(a, 1)
	if r == nil || r.reason != refusedQuota {
		t.Fatalf("a beyond its quota: %+v", r)
	}
	want := `create_region: tenant "a" holds 60 regions; 1 more would exceed its regions quota of 60 (socket main)`
	if got := r.text("create_region", "a", "main"); got != want {
		t.Fatalf("refusal:\n got %s\nwant %s", got, want)
	}
	// b within its guarantee: always.
	for range 10 {
		if r := p.admit(b, 1); r != nil {
			t.Fatalf("b within its guarantee at %d: %+v", b.held, r)
		}
		p.take(b, 1)
	}
	// Beyond it, b may take what is not kept for 2 newcomers: 30-20 = 10.
	if r := p.admit(b, 11); r == nil || r.reason != refusedReserve {
		t.Fatalf("b into the reserve: %+v", r)
	}
	r = p.admit(b, 11)
	want = `register_region: tenant "b" holds 10 regions; 11 more is beyond its regions guarantee of 10, and the engine keeps 20 free for the guarantees of other tenants (30 free) (socket main)`
	if got := r.text("register_region", "b", "main"); got != want {
		t.Fatalf("refusal:\n got %s\nwant %s", got, want)
	}
	if r := p.admit(b, 10); r != nil {
		t.Fatalf("b up to the reserve: %+v", r)
	}
	p.take(b, 10)
	// Two newcomers fit, each with its whole guarantee.
	c, d, e := &share{min: 10, max: 60}, &share{min: 10, max: 60}, &share{min: 10, max: 60}
	for _, sh := range []*share{c, d} {
		if r := p.activate(sh); r != nil {
			t.Fatalf("newcomer: %+v", r)
		}
		for range 10 {
			if r := p.admit(sh, 1); r != nil {
				t.Fatalf("newcomer within its guarantee: %+v", r)
			}
			p.take(sh, 1)
		}
	}
	// A third does not, and is told why.
	r = p.activate(e)
	want = `connect: tenant "e" is new, and its regions guarantee of 10 does not fit: 0 free, of which the engine keeps 0 for the guarantees of the tenants it serves (socket main)`
	if r == nil || r.reason != refusedNewcomer || r.text("connect", "e", "main") != want {
		t.Fatalf("third newcomer: %+v\n got %s\nwant %s", r, r.text("connect", "e", "main"), want)
	}
	// a gives back and goes: its room is free again, also for e.
	p.give(a, 60)
	p.deactivate(a)
	if r := p.activate(e); r != nil {
		t.Fatalf("after a left: %+v", r)
	}
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
	if p.used != 40 || p.unmet != 10 {
		t.Fatalf("used %d unmet %d, want 40 and e's 10", p.used, p.unmet)
	}
}

// Bytes read as bytes, counts with their noun.
func TestPoolRefusalUnits(t *testing.T) {
	r := &refusal{pool: poolMemory, reason: refusedQuota, held: 3 << 20, more: 1 << 20, max: 4 << 20}
	want := `create_region: tenant "t" holds 3145728 bytes (3.0 MiB); 1048576 bytes (1.0 MiB) more would exceed its memory_bytes quota of 4194304 bytes (4.0 MiB) (socket s)`
	if got := r.text("create_region", "t", "s"); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	r = &refusal{pool: poolConns, reason: refusedQuota, held: 64, more: 1, max: 64}
	if got := r.text("connect", "t", "s"); !strings.Contains(got, "holds 64 control connections; 1 more would exceed its conns quota of 64") {
		t.Fatal(got)
	}
}

var poolSeed = flag.Uint64("pool-seed", 0, "TestPoolRandom's seed (0: from the clock)")

// Random tenants come, charge, refund and go, each after the rule: the
// invariant holds at every step, a charge within a guarantee is never
// refused, any K newcomers are admitted together, and no tenant exceeds
// its quota. Reproduce a failure with -pool-seed=N.
func TestPoolRandom(t *testing.T) {
	seed := *poolSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	for run := range 20 {
		s := seed + uint64(run)
		rng := rand.New(rand.NewPCG(s, 1))
		total := 50 + rng.Uint64N(200)
		k := rng.Uint64N(4)
		gmax := total / (k + 2)
		p := &pool{id: poolSlots, total: total, newcomers: k, newcomerMin: gmax}
		var active []*share
		newcomers := 0 // activated since the last charge beyond a guarantee
		for step := range 2000 {
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d (reproduce with -pool-seed=%d), step %d: "+format, append([]any{s, seed, step}, args...)...)
			}
			switch op := rng.IntN(10); {
			case op == 0 || len(active) == 0: // a newcomer
				sh := &share{min: rng.Uint64N(gmax + 1)}
				sh.max = sh.min + rng.Uint64N(total)
				r := p.activate(sh)
				if r == nil {
					active = append(active, sh)
					newcomers++
				} else if uint64(newcomers) < k {
					fail("newcomer %d of %d since the reserve was last checked refused: %+v", newcomers+1, k, r)
				}
			case op <= 5: // a charge
				sh := active[rng.IntN(len(active))]
				d := 1 + rng.Uint64N(max(1, sh.max/4))
				r := p.admit(sh, d)
				switch {
				case r == nil:
					if sh.held+d > sh.min {
						newcomers = 0
					}
					p.take(sh, d)
				case sh.held+d <= sh.min:
					fail("a charge within the guarantee refused: held %d + %d, min %d: %+v", sh.held, d, sh.min, r)
				}
			default: // a refund, and maybe the tenant goes
				i := rng.IntN(len(active))
				sh := active[i]
				if sh.held > 0 {
					p.give(sh, 1+rng.Uint64N(sh.held))
				}
				if sh.held == 0 && rng.IntN(2) == 0 {
					p.deactivate(sh)
					active = append(active[:i], active[i+1:]...)
				}
			}
			if err := p.check(); err != nil {
				fail("%v", err)
			}
			var used, unmet uint64
			for _, sh := range active {
				if sh.held > sh.max {
					fail("held %d beyond the quota %d", sh.held, sh.max)
				}
				used += sh.held
				unmet += sh.unmet()
			}
			if used != p.used || unmet != p.unmet {
				fail("books: used %d unmet %d, the shares say %d and %d", p.used, p.unmet, used, unmet)
			}
		}
	}
}
