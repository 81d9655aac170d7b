package wire

import "testing"

// Every initiator port names its core and lies at or above
// InitiatorPortBase; the engine's base and core ports lie below it.
func TestInitiatorPort(t *testing.T) {
	for core := uint16(0); core < MaxCores; core++ {
		for e := 0; e < 256; e++ {
			p := InitiatorPort(uint8(e), core)
			if c, ok := PortCore(p); !ok || c != core || p < InitiatorPortBase || (p>>6)&0xff != uint16(e) {
				t.Fatalf("InitiatorPort(%d, %d) = %#x: PortCore %d, %v", e, core, p, c, ok)
			}
		}
	}
	for _, p := range []uint16{4792, 4792 + 63, InitiatorPortBase - 1, 0} {
		if _, ok := PortCore(p); ok {
			t.Fatalf("port %d taken for an initiator port", p)
		}
	}
}
