package engine

import (
	"testing"
	"time"
)

// §6.1's threshold: the queue a serving core drains in the time an
// answer has left, rounded down, within [1, InboundQueue].
func TestDeriveNackThreshold(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    NackDerivation
		want int
	}{
		// The paper's simulations (§7.5): TIMEOUT 4 RTT, DISPATCH_TIMEOUT
		// 2 RTT, RTT 5 µs; a server of 2.6 M requests a second.
		{"paper", NackDerivation{Timeout: 20 * time.Microsecond, RTT: 5 * time.Microsecond, Dispatch: 10 * time.Microsecond, ServePerSec: 2.6e6, InboundQueue: 1024}, 13},
		{"net_tap", NackDerivation{Timeout: 7 * time.Millisecond, RTT: 1532 * time.Microsecond, ServePerSec: 64 / 412e-6, InboundQueue: 1024}, 849},
		{"above the queue", NackDerivation{Timeout: 2 * time.Millisecond, RTT: 118 * time.Microsecond, ServePerSec: 64 / 58.6e-6, InboundQueue: 1024}, 1024},
		{"no time left", NackDerivation{Timeout: 2 * time.Millisecond, RTT: 245 * time.Microsecond, Dispatch: 2 * time.Millisecond, ServePerSec: 1e6, InboundQueue: 1024}, 1},
		{"no rate", NackDerivation{Timeout: 2 * time.Millisecond, InboundQueue: 64}, 1},
	} {
		d := DeriveNackThreshold(tc.d)
		if d.Threshold != tc.want {
			t.Errorf("%s: %v, want %d", tc.name, d, tc.want)
		}
	}
	d := DeriveNackThreshold(NackDerivation{Timeout: 7 * time.Millisecond, RTT: 1532 * time.Microsecond, ServePerSec: 155340, InboundQueue: 1024})
	if s := d.String(); s != "(7ms − 1.532ms − 0s) × 155340/s = 849.4 → 849 (within [1, 1024])" {
		t.Errorf("String: %s", s)
	}
}
