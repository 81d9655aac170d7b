package kvload

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"
)

// grayProb is the probability that Gray's method, as YCSB runs it, draws
// rank k of items with exponent theta and zeta zetan: ranks 0 and 1 are
// exact Zipf; rank k >= 2 is drawn when u lies in
// [max(u(k), (1+0.5^theta)/zetan), u(k+1)), u(x) = 1 + ((x/items)^(1-theta) - 1)/eta.
func grayProb(k, items uint64, theta, zetan float64) float64 {
	switch k {
	case 0:
		return 1 / zetan
	case 1:
		return math.Pow(0.5, theta) / zetan
	}
	eta := (1 - math.Pow(2/float64(items), 1-theta)) / (1 - Zeta(2, theta)/zetan)
	u := func(x uint64) float64 { return 1 + (math.Pow(float64(x)/float64(items), 1-theta)-1)/eta }
	lo := max(u(k), (1+math.Pow(0.5, theta))/zetan)
	return max(u(k+1)-lo, 0)
}

// within says whether an observed count of n draws agrees with
// probability p to sigmas standard deviations (binomial).
func within(count, n, p, sigmas float64) bool {
	return math.Abs(count-n*p) <= sigmas*math.Sqrt(n*p*(1-p))
}

func TestFNVHash64IsYCSBs(t *testing.T) {
	// YCSB's fnvhash64 is FNV-1a 64 over the value's bytes, least
	// significant first, made non-negative as a signed value.
	for _, v := range []uint64{0, 1, 2, 255, 256, 1 << 40, 9_999_999_999, math.MaxUint64} {
		h := fnv.New64a()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
		want := h.Sum64()
		if int64(want) < 0 {
			want = -want
		}
		if got := fnvHash64(v); got != want || int64(got) < 0 {
			t.Errorf("fnvHash64(%d) = %#x, want %#x", v, got, want)
		}
	}
}

// TestZipfianDistribution draws 2 M ranks over 100 items and checks every
// rank's count against the probability of Gray's method (chi-square), and
// that method against the true Zipf law: exact for ranks 0 and 1, within
// 15 % beyond (its known approximation).
func TestZipfianDistribution(t *testing.T) {
	const items, draws = 100, 2_000_000
	z := NewZipfian(items, ZipfTheta, rand.New(rand.NewPCG(1, 2)))
	var c [items]float64
	for range draws {
		c[z.Next()]++
	}
	zeta := Zeta(items, ZipfTheta)
	chi2, sum := 0.0, 0.0
	for k := range uint64(items) {
		p := grayProb(k, items, ZipfTheta, zeta)
		sum += p
		e := draws * p
		chi2 += (c[k] - e) * (c[k] - e) / e
		if zipf := 1 / math.Pow(float64(k+1), ZipfTheta) / zeta; math.Abs(p/zipf-1) > 0.15 {
			t.Errorf("rank %d: Gray's probability %.5f, Zipf's %.5f: more than 15 %% apart", k, p, zipf)
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Fatalf("grayProb sums to %v over every rank, want 1", sum)
	}
	// 99 degrees of freedom: mean 99, standard deviation 14.
	if chi2 > 99+6*14 {
		t.Errorf("chi-square of rank counts against Gray's method = %.1f, want about 99 (< %d)", chi2, 99+6*14)
	}
	for k := range 2 {
		if p := 1 / math.Pow(float64(k+1), ZipfTheta) / zeta; !within(c[k], draws, p, 5) {
			t.Errorf("rank %d drawn %.0f times of %d, want %.0f (exact Zipf)", k, c[k], draws, draws*p)
		}
	}
}

// TestScrambledZipfian checks YCSB's scrambled generator over 1 M keys:
// rank k's key is fnvHash64(k) mod n, drawn with rank k's probability over
// 10^10 items; the hot keys are scattered over the key space.
func TestScrambledZipfian(t *testing.T) {
	const n, draws = 1_000_000, 1_000_000
	s := NewScrambledZipfian(n, rand.New(rand.NewPCG(3, 4)))
	counts := make(map[uint64]float64)
	for range draws {
		k := s.Next()
		if k >= n {
			t.Fatalf("key %d out of 0..%d", k, n-1)
		}
		counts[k]++
	}
	for rank := range uint64(10) {
		p := grayProb(rank, scrambledItems+1, ZipfTheta, scrambledZetan)
		key := fnvHash64(rank) % n
		if !within(counts[key], draws, p, 5) {
			t.Errorf("rank %d (key %d) drawn %.0f times of %d, want %.0f", rank, key, counts[key], draws, draws*p)
		}
	}
	if p := counts[fnvHash64(0)%n] / draws; math.Abs(p-0.0378) > 0.001 {
		t.Errorf("hottest key's share %.4f, want 1/zeta(10^10, 0.99) = 0.0378", p)
	}
	// The 100 hottest ranks' keys, clustered at 0..99 without the
	// scrambling: about a tenth of them in each tenth of the key space.
	low := 0
	for rank := range uint64(100) {
		if fnvHash64(rank)%n < n/10 {
			low++
		}
	}
	if low > 25 {
		t.Errorf("%d of the 100 hottest keys lie in the first tenth of the key space, want about 10", low)
	}
}

func TestKeyAndValue(t *testing.T) {
	var k [KeyBytes]byte
	if got := string(Key(k[:], 42)); got != "user000000000042" {
		t.Errorf("Key(42) = %q", got)
	}
	if got := string(Key(k[:], maxKeys-1)); got != "user999999999999" {
		t.Errorf("Key(maxKeys-1) = %q", got)
	}
	v := Value(make([]byte, 32), 7, 32)
	if !checkValue(v, 7, 32) || checkValue(v, 8, 32) || checkValue(v[:31], 7, 32) {
		t.Errorf("checkValue does not tell key 7's 32-byte value from others")
	}
}
