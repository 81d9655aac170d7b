package kvload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
)

// KeyBytes is the size of every key: 16 bytes, as in HERD's workloads.
const KeyBytes = 16

// keyPrefix starts every key; the rest is the key's index in decimal,
// zero-padded, so an index below maxKeys fits.
const (
	keyPrefix = "user"
	keyDigits = KeyBytes - len(keyPrefix)
)

// maxKeys bounds a workload's key space (every index fits keyDigits
// decimal digits).
const maxKeys = 1_000_000_000_000

// minValueBytes is the smallest value: its first eight bytes name the
// key it belongs to, so a GET can check it got the right one.
const minValueBytes = 8

// Mix is the share of GETs among a workload's operations; the rest are
// SETs of a key drawn from the same distribution.
type Mix struct {
	Name        string  // "ycsb-c", "ycsb-b"
	GetFraction float64 // 0..1
}

// The YCSB core workloads this package runs (YCSB's workloadc and
// workloadb, whose updates are SETs of the whole value here).
var (
	YCSBC = Mix{Name: "ycsb-c", GetFraction: 1}    // read only
	YCSBB = Mix{Name: "ycsb-b", GetFraction: 0.95} // read mostly
)

// Workload is what a run asks of a store: keys 0..Keys-1 each holding a
// ValueBytes value (written by Load), drawn by YCSB's scrambled Zipfian
// (theta 0.99), GET or SET by Mix.
type Workload struct {
	Mix        Mix
	Keys       uint64
	ValueBytes int
	Seed       uint64 // each client's stream of operations derives from it
}

// Validate says what is wrong with w, if anything.
func (w Workload) Validate() error {
	switch {
	case w.Keys == 0 || w.Keys > maxKeys:
		return fmt.Errorf("kvload: Keys %d: want 1..%d", w.Keys, uint64(maxKeys))
	case w.ValueBytes < minValueBytes:
		return fmt.Errorf("kvload: ValueBytes %d: want at least %d", w.ValueBytes, minValueBytes)
	case w.Mix.GetFraction < 0 || w.Mix.GetFraction > 1:
		return fmt.Errorf("kvload: Mix %q GetFraction %v: want 0..1", w.Mix.Name, w.Mix.GetFraction)
	}
	return nil
}

// Key writes key i's KeyBytes bytes ("user" and i in twelve decimal
// digits) into dst, which must hold KeyBytes, and returns them.
func Key(dst []byte, i uint64) []byte {
	dst = dst[:KeyBytes]
	copy(dst, keyPrefix)
	for d := KeyBytes - 1; d >= len(keyPrefix); d-- {
		dst[d] = byte('0' + i%10)
		i /= 10
	}
	return dst
}

// Value writes key i's value of size bytes (size >= 8) into dst, which
// must hold size bytes, and returns it: i little-endian, then bytes that
// depend on i and their position.
func Value(dst []byte, i uint64, size int) []byte {
	dst = dst[:size]
	binary.LittleEndian.PutUint64(dst, i)
	for j := minValueBytes; j < size; j++ {
		dst[j] = byte(i + uint64(j)*31)
	}
	return dst
}

// errBadValue is a GET's answer that is not the value Value wrote for the
// key (another key's, or the wrong size).
var errBadValue = errors.New("kvload: GET returned a value that is not the key's")

// checkValue says whether v is key i's value of size bytes: its size and
// the key it names (the rest is not compared, to keep the check cheap).
func checkValue(v []byte, i uint64, size int) bool {
	return len(v) == size && binary.LittleEndian.Uint64(v) == i
}

// Op is one operation of a workload.
type Op struct {
	Set bool   // SET (else GET)
	Key uint64 // the key's index
}

// opSource draws one client's operations.
type opSource struct {
	keys    *ScrambledZipfian
	rng     *rand.Rand
	getFrac float64
}

// source returns client c's operations (a stream of its own, derived
// from w.Seed and c).
func (w Workload) source(c uint64) *opSource {
	rng := rand.New(rand.NewPCG(w.Seed, c+1))
	return &opSource{keys: NewScrambledZipfian(w.Keys, rng), rng: rng, getFrac: w.Mix.GetFraction}
}

func (s *opSource) next() Op {
	set := s.getFrac < 1 && s.rng.Float64() >= s.getFrac
	return Op{Set: set, Key: s.keys.Next()}
}
