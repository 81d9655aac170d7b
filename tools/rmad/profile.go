package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/aesni/mb"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/tsc"
	"github.com/onerma/onerma/wire"
)

// rmad -selftest -profile: the cost accounting of the run (engine/stage).
// Every core, its loop and its port mark their stages on one
// stage.Stages, reading the CPU's time-stamp counter (internal/tsc); each
// core's op source snapshots it when its measured window opens and
// closes. After the run rmad measures, on core 0's polling thread, what
// the AEADs of one op cost with the engine's backend (cryptoCost), and
// prints the table: each stage's cycles and ns per op over the window,
// its share, and its budget (selfTestBudget) with how far over it is.

// newStages returns one accumulator per core, reading the counter.
func newStages(cores int) []*stage.Stages {
	s := make([]*stage.Stages, cores)
	for i := range s {
		s[i] = stage.New(tsc.Read)
	}
	return s
}

// opMessages lists the messages of one op that this engine seals and
// those it opens, by payload bytes (-1: a request, whose tag is a GMAC of
// its header; 0: a pull or an acknowledgment, a tag only), at chunk bytes
// per frame. On its own region (peer false) the engine plays both roles
// and seals and opens every message: a READ's request and response
// chunks, a WRITE's request, pull, data chunks and acknowledgment. To a
// peer it is the initiator: it seals a READ's request and opens its
// chunks; it seals a WRITE's request and data and opens its pull and
// acknowledgment.
func opMessages(op abi.Op, size, chunk int, peer bool) (seals, opens []int) {
	var data []int
	for off := 0; off < size; off += chunk {
		data = append(data, min(chunk, size-off))
	}
	req := []int{-1}
	switch {
	case op == abi.OpRead && peer:
		return req, data
	case op == abi.OpRead:
		all := append(req, data...)
		return all, all
	case peer:
		return append(req, data...), []int{0, 0}
	}
	all := append(append([]int{-1, 0}, data...), 0)
	return all, all
}

// cryptoCost is what one op's AEADs cost on this thread, in counter
// cycles: its seals (Seal), its opens (Open), and for the goodput
// targets one 4 KB message sealed and opened as aes-gcm-limit measures it
// (Ref4K: the jobs queued and run; 0 unless asked for).
type cryptoCost struct {
	Seal, Open, Ref4K float64
}

// cryptoBurst is how many messages a measured batch holds: a tx or rx
// burst, as the engine's batches run.
const cryptoBurst = 32

// cryptoReps is how many batches are timed; the median is kept (a busy
// host's preemptions land in a few).
const cryptoReps = 401

// measureCrypto measures the seals of the messages seals and the opens of
// the messages opens (opMessages) of one op on backend (engine.CryptoGo
// or engine.CryptoIPsecMB), batched as the engine batches them: as many
// ops' messages as fill a burst, sealed in one run and opened in
// another, each run timed alone (queueing a job is the Build's or the
// Receive's, running the batch the Seal's or the Open's); with ref4K, also
// one 4 KB message's seal and open with their queueing. Each is the
// median over the batches, per op.
func measureCrypto(backend string, seals, opens []int, ref4K bool) (cryptoCost, error) {
	var c cryptoCost
	seal, _, err := measureBatch(backend, seals)
	if err != nil {
		return c, err
	}
	_, open, err := measureBatch(backend, opens)
	if err != nil {
		return c, err
	}
	c.Seal, c.Open = seal, open
	if ref4K {
		r, err := newCryptoBench(backend, slices.Repeat([]int{4096}, cryptoBurst))
		if err != nil {
			return c, err
		}
		defer r.free()
		if c.Ref4K, err = r.runWhole(); err != nil {
			return c, err
		}
		c.Ref4K /= cryptoBurst
	}
	return c, nil
}

// measureBatch seals and opens bursts of one op's messages msgs and
// returns the cycles of the seal run and of the open run, per op.
func measureBatch(backend string, msgs []int) (seal, open float64, err error) {
	per := max(1, cryptoBurst/len(msgs)) // ops in a batch
	b, err := newCryptoBench(backend, slices.Repeat(msgs, per))
	if err != nil {
		return 0, 0, err
	}
	defer b.free()
	if seal, open, err = b.run(); err != nil {
		return 0, 0, err
	}
	return seal / float64(per), open / float64(per), nil
}

// cryptoBench seals and opens a fixed set of messages (msgs: payload
// bytes, -1 for a request's GMAC) like the engine: frames in registered
// memory, a 64-byte AAD, responses curried with a request IV.
type cryptoBench struct {
	mb     bool
	a      *aesni.AEAD
	k      *mb.Key
	b      *mb.Batch
	msgs   []int
	mem    []byte
	frames [][]byte // each: payload ‖ tag
	src    [][]byte // plaintexts
	dst    [][]byte // where opens write
	nonces []byte
	aad    []byte
	reqIV  []byte
	ctr    uint64
}

func newCryptoBench(backend string, msgs []int) (*cryptoBench, error) {
	key := aesni.Key{0x51, 0x7a, 0x9e}
	b := &cryptoBench{mb: backend == engine.CryptoIPsecMB, msgs: msgs,
		nonces: make([]byte, len(msgs)*aesni.NonceSize), aad: make([]byte, 64), reqIV: make([]byte, aesni.NonceSize)}
	n := 0
	for _, l := range msgs {
		n += 3*max(l, 0) + aesni.TagSize
	}
	b.mem = make([]byte, n)
	off := 0
	take := func(l int) []byte { s := b.mem[off : off+l : off+l]; off += l; return s }
	for _, l := range msgs {
		p := max(l, 0)
		b.frames = append(b.frames, take(p+aesni.TagSize))
		b.src = append(b.src, take(p))
		b.dst = append(b.dst, take(p))
	}
	for i := range b.mem {
		b.mem[i] = byte(i)
	}
	var err error
	if !b.mb {
		b.a, err = aesni.NewAEAD(key)
		return b, err
	}
	if b.k, err = mb.NewKey(key); err != nil {
		return nil, err
	}
	if b.b, err = mb.NewBatch(len(msgs)); err != nil {
		b.k.Free()
		return nil, err
	}
	if err := b.b.Register(b.mem); err != nil {
		b.free()
		return nil, err
	}
	return b, nil
}

func (b *cryptoBench) free() {
	if b.b != nil {
		b.b.Unregister(b.mem)
		b.b.Free()
		b.k.Free()
		b.b = nil
	}
}

// nonce is message i's nonce, fresh for each seal.
func (b *cryptoBench) nonce(i int, fresh bool) []byte {
	n := b.nonces[i*aesni.NonceSize : (i+1)*aesni.NonceSize]
	if fresh {
		b.ctr++
		binary.BigEndian.PutUint64(n[4:], b.ctr)
	}
	return n
}

// queueSeals seals every message: queued in the batch (ipsec-mb), or at
// once (crypto/cipher).
func (b *cryptoBench) queueSeals() {
	for i, l := range b.msgs {
		f, nonce := b.frames[i], b.nonce(i, true)
		switch {
		case b.mb && l < 0:
			b.b.SealRequest(b.k, f, nonce, b.aad)
		case b.mb:
			b.b.SealResponse(b.k, f, b.src[i], nonce, b.aad, b.reqIV)
		case l < 0:
			b.a.SealRequest(f, nonce, b.aad)
		default:
			b.a.SealResponse(f, b.src[i], nonce, b.aad, b.reqIV)
		}
	}
}

// queueOpens opens every message sealed last: queued (ipsec-mb) or at
// once; false if one failed.
func (b *cryptoBench) queueOpens() bool {
	ok := true
	for i, l := range b.msgs {
		f, nonce := b.frames[i], b.nonce(i, false)
		switch {
		case b.mb && l < 0:
			b.b.OpenRequest(b.k, f, nonce, b.aad)
		case b.mb && l == 0:
			b.b.OpenResponse(b.k, nil, f, nonce, b.aad, b.reqIV)
		case b.mb:
			b.b.OpenResponseDirect(b.k, b.dst[i], f, nonce, b.aad, b.reqIV)
		case l < 0:
			ok = b.a.OpenRequest(f, nonce, b.aad) == nil && ok
		case l == 0:
			ok = b.a.OpenResponse(nil, f, nonce, b.aad, b.reqIV) == nil && ok
		default:
			ok = b.a.OpenResponseDirect(b.dst[i], f, nonce, b.aad, b.reqIV) == nil && ok
		}
	}
	return ok
}

var errCryptoOpen = errors.New("the crypto measurement's opens failed")

// run times the seal runs and the open runs of the messages (the jobs'
// queueing outside, with ipsec-mb) and returns the medians, cycles per
// batch.
func (b *cryptoBench) run() (seal, open float64, err error) {
	seals, opens := make([]uint64, cryptoReps), make([]uint64, cryptoReps)
	for r := range cryptoReps {
		if b.mb {
			b.queueSeals()
			t0 := tsc.Read()
			b.b.Run()
			t1 := tsc.Read()
			b.queueOpens()
			t2 := tsc.Read()
			failed := b.b.Run()
			t3 := tsc.Read()
			if failed != 0 {
				return 0, 0, errCryptoOpen
			}
			seals[r], opens[r] = t1-t0, t3-t2
			continue
		}
		t0 := tsc.Read()
		b.queueSeals()
		t1 := tsc.Read()
		ok := b.queueOpens()
		t2 := tsc.Read()
		if !ok {
			return 0, 0, errCryptoOpen
		}
		seals[r], opens[r] = t1-t0, t2-t1
	}
	return median(seals), median(opens), nil
}

// runWhole times the seals and opens with their queueing, as
// aes-gcm-limit does, and returns the median, cycles per batch.
func (b *cryptoBench) runWhole() (float64, error) {
	t := make([]uint64, cryptoReps)
	for r := range cryptoReps {
		t0 := tsc.Read()
		b.queueSeals()
		if b.mb {
			b.b.Run()
		}
		ok := b.queueOpens()
		if b.mb {
			ok = b.b.Run() == 0
		}
		t[r] = tsc.Read() - t0
		if !ok {
			return 0, errCryptoOpen
		}
	}
	return median(t), nil
}

func median(v []uint64) float64 {
	slices.Sort(v)
	return float64(v[len(v)/2])
}

// selfTestTarget is the speed target of a run as ns per op on one core
// (0: none) and where it comes from; ref4K is one 4 KB message's seal and
// open in ns (cryptoCost.Ref4K), the goodput targets' denominator:
//
//	64 B read_bw, this engine's region    1/ReadRateLoopback: both roles on the core
//	64 B read_bw, a peer's region         1/ReadRatePerRole: the initiator's role
//	4 KB read_bw, this engine's region    ref4K/ReadGoodput (MTU below 9000) or
//	                                      ref4K/ReadGoodputJumbo
//	4 KB write_bw, this engine's region   ref4K/WriteGoodput
//
// Other runs (other sizes, read_lat, 64 B WRITEs, 4 KB to a peer) have no
// target of their own.
func selfTestTarget(test string, size int, peer bool, mtu int, ref4K float64) (float64, string) {
	switch {
	case test == "read_bw" && size == 64 && !peer:
		return 1e9 / benchrow.ReadRateLoopback, fmt.Sprintf("%.1f M ops/s, both roles on one core", benchrow.ReadRateLoopback/1e6)
	case test == "read_bw" && size == 64:
		return 1e9 / benchrow.ReadRatePerRole, fmt.Sprintf("%.1f M ops/s per role", benchrow.ReadRatePerRole/1e6)
	case test == "read_bw" && size == 4096 && !peer:
		g := benchrow.ReadGoodput
		if mtu >= 9000 {
			g = benchrow.ReadGoodputJumbo
		}
		return ref4K / g, fmt.Sprintf("goodput %.2f of one core's 4 KB seal+open, %.1f ns", g, ref4K)
	case test == "write_bw" && size == 4096 && !peer:
		return ref4K / benchrow.WriteGoodput, fmt.Sprintf("goodput %.2f of one core's 4 KB seal+open, %.1f ns", benchrow.WriteGoodput, ref4K)
	}
	return 0, ""
}

// profileReport measures the crypto of the run's op on core 0's polling
// thread (after the run: the loop waits meanwhile) and makes the stage
// table of the window's counts d for ops ops, the counter at hz.
func (r *selfTestRun) profileReport(exec func(func(*engine.Core)) error, d stage.Snapshot, ops uint64, hz float64) (*stage.Report, error) {
	o := r.o
	seals, opens := opMessages(o.op(), o.size, min(wire.MaxPayload(r.mtu), abi.MaxOpBytes), o.peer != "")
	var (
		cost cryptoCost
		err  error
	)
	ref := o.size == 4096 && o.peer == ""
	if e := exec(func(*engine.Core) { cost, err = measureCrypto(r.crypto, seals, opens, ref) }); e != nil {
		return nil, e
	}
	if err != nil {
		return nil, err
	}
	ns := func(cycles float64) float64 { return cycles / hz * 1e9 }
	target, from := selfTestTarget(o.test, o.size, o.peer != "", r.mtu, ns(cost.Ref4K))
	b := stage.Budget{TargetNs: target, Target: from, SealNs: ns(cost.Seal), OpenNs: ns(cost.Open)}
	rep := stage.NewReport(d, ops, hz, b)
	return &rep, nil
}
