package sim

import (
	"errors"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
)

// The lookup scenario does what it is for: LOOKUPs found, missed (bare
// and with the bucket), too large and refused for a wrong key, against
// indexes their owners rewrite all along.
func TestLookupScenarioExercises(t *testing.T) {
	var found, missed, large, updates, lookups, authFail uint64
	for seed := uint64(1); seed <= 6; seed++ {
		res, err := Run(Lookup(seed))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		found += res.LookupsFound
		missed += res.LookupsMissed
		large += res.LookupsTooLarge
		updates += res.LookupUpdates
		lookups += res.Lookups
		authFail += res.LookupStatus[abi.StatusRemoteAuthFailure]
	}
	t.Logf("%d lookups: %d found, %d missed, %d too large, %d refused for their key; %d index updates", lookups, found, missed, large, authFail, updates)
	if found == 0 || missed == 0 || large == 0 || authFail == 0 || updates == 0 {
		t.Fatal("a case the scenario is for never happened")
	}
}

// The checker catches a mix: an owner that rewrites records in place
// (no RCU) while LOOKUPs are in flight makes an answer's target another
// record than its entry's.
func TestSimCatchesMixedLookup(t *testing.T) {
	caught := 0
	for seed := uint64(1); seed <= 4; seed++ {
		cfg := Lookup(seed)
		cfg.Net = NetConfig{LatencyNs: 1000, BitsPerSec: 25e9, UpQueueBytes: 4 << 20, DownQueueBytes: 4 << 20, RxQueueFrames: 1024}
		for k := int64(1); k < 40; k++ {
			cfg.scripts = append(cfg.scripts, scriptStep{at: k * 40_000, do: func(s *Sim) {
				for _, n := range s.nodes {
					for _, p := range n.app.portals {
						if p.lk != nil {
							fill(p.lk.slab.mem, byte(k)) // behind the model's back
						}
					}
				}
			}})
		}
		_, err := Run(cfg)
		var f *Failure
		if errors.As(err, &f) && strings.Contains(f.Msg, "a mix") {
			caught++
		} else if err != nil {
			t.Fatalf("seed %d failed otherwise: %v", seed, err)
		}
	}
	if caught == 0 {
		t.Fatal("records rewritten in place under LOOKUPs went unnoticed")
	}
}
