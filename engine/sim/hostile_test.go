package sim

import (
	"errors"
	"strings"
	"testing"
)

// TestHostileInitiatorNeedsBounds checks the scenario: with the server's
// per-owner and per-sender bounds off (Config.Unbound), the attacker's
// queue takes the NACK threshold and its slow pulls the pull contexts,
// and the victims' ops are refused or late: the run fails.
func TestHostileInitiatorNeedsBounds(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		cfg := HostileInitiator(seed)
		cfg.Engine.Unbound()
		_, err := Run(cfg)
		var f *Failure
		if !errors.As(err, &f) {
			t.Fatalf("seed %d: the victims got through an unbounded server's queue and pulls: %v", seed, err)
		}
		if !strings.Contains(f.Msg, "completed with NACK") && !strings.Contains(f.Msg, "completed with TIMEOUT") && !strings.Contains(f.Msg, "beyond the run's bound") {
			t.Fatalf("seed %d: the run failed, but not for a victim's op: %s", seed, f.Msg)
		}
		t.Logf("seed %d unbounded: %s", seed, f.Msg)
	}
}
