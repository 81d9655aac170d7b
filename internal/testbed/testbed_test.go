package testbed

import "testing"

func TestStaleMemifSocket(t *testing.T) {
	a, b := MemifPair("rmad", "/d", "x", "y", "10.0.0.1", "10.0.0.2")
	for _, c := range []struct{ vdev, want string }{
		{a.Vdev, "/d/x-y.memif"},
		{b.Vdev, ""}, // the client's: the server's to remove
		{"net_memif0,role=server,id=0,socket=/s.memif", ""}, // abstract (DPDK's default): no file
		{"net_ring0", ""},
	} {
		if got := staleMemifSocket(c.vdev); got != c.want {
			t.Errorf("%q: %q, want %q", c.vdev, got, c.want)
		}
	}
}
