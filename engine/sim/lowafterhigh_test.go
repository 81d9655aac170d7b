package sim

import "testing"

// TestLowAfterHighSeeds runs every scenario with the serving side's bound
// on low-class requests after a high-class frame (engine.Config.
// LowAfterHigh, rmad's default; the scenarios' engines run without it)
// and checks every invariant as TestSimSeeds does: the bound must neither
// starve the low class into TIMEOUTs in the clean scenarios nor break any
// other rule. -sim.seeds and -sim.seed apply.
func TestLowAfterHighSeeds(t *testing.T) {
	for _, sc := range Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			bounded := func(seed uint64) Config {
				c := sc.Make(seed)
				c.Engine.LowAfterHigh = 1
				return c
			}
			if _, seed, err := runSeeds(seedsFor(t), bounded); err != nil {
				t.Fatalf("%v\nreproduce with: go test ./engine/sim -run 'TestLowAfterHighSeeds/%s$' -sim.seed=%d", err, sc.Name, seed)
			}
		})
	}
}
