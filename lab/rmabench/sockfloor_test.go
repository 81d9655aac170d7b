package main

import "testing"

// TestSocketFloor: the floor's child echoes every datagram, and the row
// counts every round trip.
func TestSocketFloor(t *testing.T) {
	r, err := socketFloor(300)
	if err != nil {
		t.Fatal(err)
	}
	if r.Setup != "fig14-socket-floor" || r.Test != "xproc_socket" || r.Size != sockFloorMsg || r.Ops != 300 || r.P50us <= 0 || r.P99us == nil || *r.P99us < r.P50us {
		t.Fatalf("row %+v", r)
	}
	rows := []Row{{Setup: "fig14-rekey-call", Test: "rekey_call", Cores: 1, P50us: 30}, r}
	if m, ok := fig14CallMetric(rows); !ok || m.verdict != met {
		t.Errorf("metric %+v", m)
	}
}
