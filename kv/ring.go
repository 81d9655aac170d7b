package kv

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// MaxReplicas bounds Replicas; MaxServers the servers of one client.
const (
	MaxReplicas = 8
	MaxServers  = 255
)

// ring is a consistent-hash ring: each server owns vnodes points, placed
// by the hash of its name; a key's replicas are the first distinct
// servers at or after its point, so adding or removing a server moves
// only the keys next to its points. Every client configured with the
// same server names places every key on the same servers.
type ring struct {
	points []uint64
	owners []uint8 // server of each point
	n      int     // servers
}

func newRing(names []string, vnodes int) (*ring, error) {
	if len(names) == 0 || len(names) > MaxServers {
		return nil, fmt.Errorf("kv: %d servers, want 1..%d", len(names), MaxServers)
	}
	type pt struct {
		p uint64
		o uint8
	}
	pts := make([]pt, 0, len(names)*vnodes)
	seen := map[string]bool{}
	for i, name := range names {
		if seen[name] {
			return nil, fmt.Errorf("kv: server %q listed twice", name)
		}
		seen[name] = true
		for v := range vnodes {
			pts = append(pts, pt{xxhash.Sum64String(name + "#" + strconv.Itoa(v)), uint8(i)})
		}
	}
	slices.SortFunc(pts, func(a, b pt) int {
		switch {
		case a.p < b.p:
			return -1
		case a.p > b.p:
			return 1
		}
		return int(a.o) - int(b.o)
	})
	r := &ring{points: make([]uint64, len(pts)), owners: make([]uint8, len(pts)), n: len(names)}
	for i, p := range pts {
		r.points[i], r.owners[i] = p.p, p.o
	}
	return r, nil
}

// replicas writes the servers of the key of hash h, in order of
// preference, into out and returns how many (min(want, servers)).
func (r *ring) replicas(h uint64, want int, out *[MaxReplicas]uint8) int {
	want = min(want, r.n, MaxReplicas)
	p := ringPoint(h)
	i, _ := slices.BinarySearch(r.points, p)
	n := 0
	for k := 0; k < len(r.points) && n < want; k++ {
		o := r.owners[(i+k)%len(r.points)]
		if !slices.Contains(out[:n], o) {
			out[n] = o
			n++
		}
	}
	return n
}
