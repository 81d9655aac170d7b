package main

import (
	"math"
	"slices"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
)

// TestOpMessages: the messages one op seals and opens, both roles on
// this engine or only the initiator's toward a peer.
func TestOpMessages(t *testing.T) {
	for _, tc := range []struct {
		op           abi.Op
		size, chunk  int
		peer         bool
		seals, opens []int
	}{
		{abi.OpRead, 64, 1408, false, []int{-1, 64}, []int{-1, 64}},
		{abi.OpRead, 4096, 1408, false, []int{-1, 1408, 1408, 1280}, []int{-1, 1408, 1408, 1280}},
		{abi.OpRead, 4096, 4096, true, []int{-1}, []int{4096}},
		{abi.OpWrite, 64, 1408, false, []int{-1, 0, 64, 0}, []int{-1, 0, 64, 0}},
		{abi.OpWrite, 4096, 1408, true, []int{-1, 1408, 1408, 1280}, []int{0, 0}},
	} {
		s, o := opMessages(tc.op, tc.size, tc.chunk, tc.peer)
		if !slices.Equal(s, tc.seals) || !slices.Equal(o, tc.opens) {
			t.Errorf("%v %d B at %d, peer %v: seals %v opens %v, want %v %v", tc.op, tc.size, tc.chunk, tc.peer, s, o, tc.seals, tc.opens)
		}
	}
}

// TestSelfTestTarget: the runs with a speed target, and theirs.
func TestSelfTestTarget(t *testing.T) {
	for _, tc := range []struct {
		test string
		size int
		peer bool
		mtu  int
		want float64
	}{
		{"read_bw", 64, false, 1500, 250},
		{"read_bw", 64, true, 1500, 200},
		{"read_bw", 4096, false, 1500, 1000 / 0.55},
		{"read_bw", 4096, false, 9000, 1000 / 0.70},
		{"write_bw", 4096, false, 1500, 1000 / 0.60},
		{"read_bw", 4096, true, 1500, 0},
		{"read_lat", 64, false, 1500, 0},
		{"write_bw", 64, false, 1500, 0},
		{"read_bw", 512, false, 1500, 0},
	} {
		got, from := selfTestTarget(tc.test, tc.size, tc.peer, tc.mtu, 1000)
		if math.Abs(got-tc.want) > 1e-9 || (got > 0) != (from != "") {
			t.Errorf("%s %d B peer %v mtu %d: %v (%q), want %v", tc.test, tc.size, tc.peer, tc.mtu, got, from, tc.want)
		}
	}
}

// TestMeasureCrypto: the measurement runs on both backends and finds
// the larger messages dearer.
func TestMeasureCrypto(t *testing.T) {
	for _, backend := range []string{engine.CryptoGo, engine.CryptoIPsecMB} {
		s64, o64 := opMessages(abi.OpRead, 64, 1408, false)
		small, err := measureCrypto(backend, s64, o64, false)
		if err != nil {
			t.Fatal(err)
		}
		s4, o4 := opMessages(abi.OpRead, 4096, 1408, false)
		big, err := measureCrypto(backend, s4, o4, true)
		if err != nil {
			t.Fatal(err)
		}
		if small.Seal <= 0 || small.Open <= 0 || small.Ref4K != 0 || big.Seal <= small.Seal || big.Open <= small.Open || big.Ref4K <= 0 {
			t.Errorf("%s: 64 B %+v, 4 KB %+v", backend, small, big)
		}
	}
}
