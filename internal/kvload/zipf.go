package kvload

import (
	"math"
	"math/rand/v2"
)

// ZipfTheta is YCSB's Zipfian constant (requestdistribution=zipfian).
const ZipfTheta = 0.99

// YCSB's scrambled Zipfian draws a rank from a Zipfian over a fixed space
// of scrambledItems items, whose zeta (sum of 1/i^0.99 for i = 1..10^10)
// it precomputes, then hashes the rank into the key space: the popular
// keys are scattered over the key space instead of clustered at its start.
const (
	scrambledItems = 10_000_000_000
	scrambledZetan = 26.46902820178302
)

// Zipfian draws ranks 0..n-1, rank 0 the most popular, with P(rank k)
// proportional to 1/(k+1)^theta, by the method of Gray et al. ("Quickly
// Generating Billion-Record Synthetic Databases", SIGMOD 1994) as YCSB's
// ZipfianGenerator implements it: exact for ranks 0 and 1, a continuous
// approximation of the tail beyond. Not safe for concurrent use; each
// goroutine draws from its own, with its own source.
type Zipfian struct {
	items            uint64
	theta, zetan     float64 // the exponent; zeta(items, theta)
	alpha, eta, half float64 // 1/(1-theta); Gray's eta; 1 + 0.5^theta
	rng              *rand.Rand
}

// Zeta returns sum_{i=1..n} 1/i^theta (n terms: O(n)).
func Zeta(n uint64, theta float64) float64 {
	s := 0.0
	for i := uint64(1); i <= n; i++ {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

// NewZipfian returns a generator of ranks 0..items-1 with exponent theta
// (0 < theta < 1), computing zeta over items (O(items) once).
func NewZipfian(items uint64, theta float64, rng *rand.Rand) *Zipfian {
	return newZipfian(items, theta, Zeta(items, theta), rng)
}

// newZipfian is NewZipfian with zeta(items, theta) given.
func newZipfian(items uint64, theta, zetan float64, rng *rand.Rand) *Zipfian {
	if items < 2 || theta <= 0 || theta >= 1 {
		panic("kvload: Zipfian needs at least 2 items and 0 < theta < 1")
	}
	z := &Zipfian{items: items, theta: theta, zetan: zetan, rng: rng}
	z.alpha = 1 / (1 - theta)
	z.eta = (1 - math.Pow(2/float64(items), 1-theta)) / (1 - Zeta(2, theta)/zetan)
	z.half = 1 + math.Pow(0.5, theta)
	return z
}

// Next returns the next rank.
func (z *Zipfian) Next() uint64 {
	u := z.rng.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < z.half {
		return 1
	}
	r := uint64(float64(z.items) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	return min(r, z.items-1)
}

// ScrambledZipfian draws keys 0..n-1 as YCSB's ScrambledZipfianGenerator
// does for theta 0.99 (its only precomputed case): a rank from a Zipfian
// over 10^10 items, hashed with FNV-1a 64 into the key space. The hottest
// key is fnvHash64(0) mod n, with probability 1/zeta(10^10) = 3.78 %;
// ranks that hash to the same key add up.
type ScrambledZipfian struct {
	z *Zipfian
	n uint64
}

// NewScrambledZipfian returns YCSB's scrambled Zipfian over keys 0..n-1
// (theta ZipfTheta), drawing from rng.
func NewScrambledZipfian(n uint64, rng *rand.Rand) *ScrambledZipfian {
	if n == 0 {
		panic("kvload: ScrambledZipfian over no keys")
	}
	// YCSB builds ZipfianGenerator(0, ITEM_COUNT): ITEM_COUNT+1 items.
	return &ScrambledZipfian{z: newZipfian(scrambledItems+1, ZipfTheta, scrambledZetan, rng), n: n}
}

// Next returns the next key index.
func (s *ScrambledZipfian) Next() uint64 {
	return fnvHash64(s.z.Next()) % s.n
}

// fnvHash64 is YCSB's Utils.fnvhash64: FNV-1a 64 over v's eight bytes,
// least significant first, read as a signed 64-bit value and made
// non-negative (Java's Math.abs; the one value it cannot negate,
// -2^63, stays as it is in Java and is 2^63 here: it occurs for no
// rank we draw and would still be a valid hash).
func fnvHash64(v uint64) uint64 {
	const (
		offset = 0xcbf29ce484222325
		prime  = 1099511628211
	)
	h := uint64(offset)
	for range 8 {
		h ^= v & 0xff
		h *= prime
		v >>= 8
	}
	if int64(h) < 0 {
		h = -h
	}
	return h
}
