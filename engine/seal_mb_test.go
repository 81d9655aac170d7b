//go:build cgo && linux && amd64

package engine

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/aesni/mb"
)

// withCrypto runs test with every testConfig core on backend crypto.
func withCrypto[T testing.TB](tb T, crypto string, test func(T)) {
	old := testCrypto
	testCrypto = crypto
	defer func() { testCrypto = old }()
	test(tb)
}

var backends = []string{CryptoGo, CryptoIPsecMB}

// The core's READ, WRITE, NACK, error, auth-failure, rekey and tamper
// tests, with the seals batched on ipsec-mb (the whole suite runs so with
// ONERMA_TEST_CRYPTO=ipsec-mb go test ./engine).
func TestIPsecMBCoreTests(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"ReadLoopbackSizes", TestReadLoopbackSizes},
		{"OutOfOrderDuplicateResponses", TestOutOfOrderDuplicateResponses},
		{"CorruptResponseRejected", TestCorruptResponseRejected},
		{"RemoteErrors", TestRemoteErrors},
		{"NackAboveThreshold", TestNackAboveThreshold},
		{"ClosePortalReclaims", TestClosePortalReclaims},
		{"GoneRegionAnswersRemoteRegion", TestGoneRegionAnswersRemoteRegion},
		{"WrongKeyFailsFast", TestWrongKeyFailsFast},
		{"TamperedRequestRefused", TestTamperedRequestRefused},
		{"ReplayedRequestFreshCiphertext", TestReplayedRequestFreshCiphertext},
		{"ResponseBoundToRequest", TestResponseBoundToRequest},
		{"ForgedAnswersDropped", TestForgedAnswersDropped},
		{"Rekey", TestRekey},
		{"NoncesUnique", TestNoncesUnique},
		{"RemoteRekey", TestRemoteRekey},
		{"RemoteRekeyLostKeyNeverInstalls", TestRemoteRekeyLostKeyNeverInstalls},
		{"WriteLoopbackSizes", TestWriteLoopbackSizes},
		{"WriteRemoteRefusals", TestWriteRemoteRefusals},
		{"WriteLostChunkNeverCommits", TestWriteLostChunkNeverCommits},
		{"WriteReplayMutatesNothing", TestWriteReplayMutatesNothing},
		{"WriteTamperedData", TestWriteTamperedData},
		{"ShutdownKeepsSentWrites", TestShutdownKeepsSentWrites},
		{"HotPathAllocs", TestHotPathAllocs},
		{"WriteHotPathAllocs", TestWriteHotPathAllocs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withCrypto(t, CryptoIPsecMB, tc.f)
		})
	}
}

// scriptFrames runs READs (64 B, 4 KB, NACKed ones), a WRITE, LOOKUPs, a READ with
// a wrong key (REMOTE_AUTHENTICATION_FAILURE) and a REKEY between two
// cores on backend crypto and returns every frame both sent, in order,
// and the completions.
func scriptFrames(t *testing.T, crypto string) ([][]byte, []abi.Completion) {
	ca, cb := pairConfigs(crypto)
	cb.NackThreshold = 2
	cb.InboundPerOwner, cb.InboundPerSender = 2, 2 // the threshold alone
	p := newPair(t, ca, cb)
	if (mbOf(p.a) != nil) != (crypto == CryptoIPsecMB) {
		t.Fatalf("%s: backend not set up", crypto)
	}
	app := openApp(t, p.a, abi.ClassLow, 16)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	src := make([]byte, 64<<10)
	pattern(src, 9)
	rs, _ := p.b.RegisterRegion(srv.id, src, abi.PermAll, testKr)
	loc := make([]byte, 64<<10)
	pattern(loc[32<<10:], 4)
	rl, _ := p.a.RegisterRegion(app.id, loc, abi.PermAll, testKr)
	var frames [][]byte
	var cpls []abi.Completion
	run := func() {
		for k := 0; k < 100; k++ {
			w := p.a.Poll(p.now) + p.b.Poll(p.now)
			fa, fb := p.ta.take(), p.tb.take()
			frames = append(append(frames, fa...), fb...)
			p.b.ReceiveBurst(p.now, fa) // with ipsec-mb: the opens batched
			p.a.ReceiveBurst(p.now, fb)
			p.now += 1000
			if w+len(fa)+len(fb) == 0 {
				break
			}
		}
		cpls = append(cpls, app.completions()...)
	}
	b := ipOf("10.0.0.2")
	app.post(t, readCmd(app.slots[0], b, rs, 0, rl, 0, 64, 1))
	run()
	for k := range 6 { // two served, four NACKed
		app.post(t, readCmd(app.slots[k], b, rs, uint64(k)*100, rl, uint64(k)*4096, 4096, uint64(10+k)))
	}
	run()
	w := readCmd(app.slots[0], b, rs, 40000, rl, 32<<10, 4096, 20)
	w.Op = abi.OpWrite
	app.post(t, w)
	run()
	// LOOKUPs: an answer in one frame (the entry and its target gathered),
	// and one of three.
	index := make([]byte, 256)
	ri, err := p.b.RegisterLookupRegion(srv.id, index, abi.PermRemoteLookup, testKr, testLayout(rs))
	if err != nil {
		t.Fatal(err)
	}
	putEntry(index, 0, 5, 1000, 200, 1)
	putEntry(index, 1, 6, 2000, 3000, 2)
	app.post(t, app.keyed(lookupCmd(app.slots[3], b, ri, 0, 5, rl, 40<<10, 4096, 25)))
	app.post(t, app.keyed(lookupCmd(app.slots[4], b, ri, 0, 6, rl, 48<<10, 4096, 26)))
	run()
	if !bytes.Equal(loc[40<<10+64:40<<10+64+200], src[1000:1200]) || !bytes.Equal(loc[48<<10+64:48<<10+64+3000], src[2000:5000]) {
		t.Fatalf("%s: LOOKUP targets not delivered", crypto)
	}
	bad := readCmd(app.slots[1], b, rs, 0, rl, 0, 64, 30)
	bad.Key = [16]byte{1, 2, 3}
	app.post(t, bad)
	run()
	copy(loc[60000:], []byte("a new region key"))
	rk := readCmd(app.slots[2], b, rs, 0, rl, 60000, aesni.KeySize, 40)
	rk.Op = abi.OpRekey
	app.post(t, rk)
	run()
	if !bytes.Equal(src[40000:40000+4096], loc[32<<10:32<<10+4096]) {
		t.Fatalf("%s: WRITE data not committed", crypto)
	}
	return frames, cpls
}

// Given the same IV source state, both backends put the same bytes on the
// wire, and the ops complete alike.
func TestCryptoBackendsSameFrames(t *testing.T) {
	fg, cg := scriptFrames(t, CryptoGo)
	fm, cm := scriptFrames(t, CryptoIPsecMB)
	want := map[abi.Status]int{abi.StatusOK: 7, abi.StatusNack: 4, abi.StatusRemoteAuthFailure: 1}
	got := map[abi.Status]int{}
	for _, c := range cg {
		got[c.Status]++
	}
	for s, n := range want {
		if got[s] != n {
			t.Fatalf("go backend: completions %+v", cg)
		}
	}
	if len(cg) != len(cm) {
		t.Fatalf("completions: go %d, ipsec-mb %d", len(cg), len(cm))
	}
	for k := range cg {
		if cg[k] != cm[k] {
			t.Fatalf("completion %d: go %+v, ipsec-mb %+v", k, cg[k], cm[k])
		}
	}
	if len(fg) != len(fm) || len(fg) < 20 {
		t.Fatalf("frames: go %d, ipsec-mb %d", len(fg), len(fm))
	}
	for k := range fg {
		if !bytes.Equal(fg[k], fm[k]) {
			t.Fatalf("frame %d (%d B) differs between backends", k, len(fg[k]))
		}
	}
}

// With ipsec-mb a seal is queued: the frame is written when the batch
// runs, which the Tx's hook does before frames are read.
func TestIPsecMBSealDeferredUntilTx(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	cfg.Crypto = CryptoIPsecMB
	tx := newTestTx(8)
	c := newCore(t, cfg, tx)
	a, err := c.ini.keys.Put(aesni.CacheKey{Region: 1, PID: 2, Op: 1}, aesni.Key{7})
	if err != nil {
		t.Fatal(err)
	}
	nonce, aad, pt := make([]byte, 12), make([]byte, 64), make([]byte, 100)
	pattern(pt, 1)
	pattern(aad, 2)
	want := make([]byte, len(pt)+16)
	a.SealResponse(want, pt, nonce, aad, nil)
	b := tx.Buffer()
	out := b[:len(pt)+16]
	c.out.seal.sealResponse(a, out, pt, nonce, aad, nil)
	if _, ok := a.Ext().(*mb.Key); !ok || mbOf(c).batch.Len() != 1 || bytes.Equal(out, want) {
		t.Fatal("seal not queued")
	}
	tx.Send(len(out))
	if f := tx.take(); len(f) != 1 || !bytes.Equal(f[0], want) {
		t.Fatal("frame read before its seal ran, or sealed wrong")
	}
	// An AEAD that leaves the cache releases its key (freed: no job
	// refers to it) and seals the Go way from then on.
	k := a.Ext().(*mb.Key)
	c.ini.keys.Purge()
	if !k.Freed() {
		t.Fatal("key of a purged AEAD not freed")
	}
	clear(out)
	c.out.seal.sealResponse(a, out, pt, nonce, aad, nil)
	if mbOf(c).batch.Len() != 0 || !bytes.Equal(out, want) {
		t.Fatal("evicted AEAD not sealed at once")
	}
	// Released with a job queued: freed by the run.
	a2, _ := c.srv.keys.Put(aesni.CacheKey{Region: 3}, aesni.Key{7})
	c.out.seal.sealResponse(a2, out, pt, nonce, aad, nil)
	k2 := a2.Ext().(*mb.Key)
	c.srv.keys.Invalidate(3)
	if k2.Freed() {
		t.Fatal("key freed with a job queued")
	}
	c.out.seal.run()
	if !k2.Freed() || !bytes.Equal(out, want) {
		t.Fatal("queued job of a released key not run or key not freed")
	}
}

type noHookTx struct{ t *testTx }

func (n noHookTx) Buffer() []byte { return n.t.Buffer() }
func (n noHookTx) Send(k int)     { n.t.Send(k) }

func TestIPsecMBNeedsTxHook(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	cfg.Crypto = CryptoIPsecMB
	_, err := New(cfg, noHookTx{newTestTx(4)})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "TxHook") || !strings.Contains(err.Error(), "noHookTx") {
		t.Fatalf("Tx without hook: %v", err)
	}
	cfg.Crypto = "openssl"
	if _, err := New(cfg, newTestTx(4)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Crypto") {
		t.Fatalf("bad backend: %v", err)
	}
	cfg.Crypto = CryptoGo
	if _, err := New(cfg, noHookTx{newTestTx(4)}); err != nil {
		t.Fatalf("go backend needs no hook: %v", err)
	}
}

func BenchmarkReadLoopback64MB(b *testing.B) {
	withCrypto(b, CryptoIPsecMB, BenchmarkReadLoopback64)
}

func BenchmarkReadLoopback4096MB(b *testing.B) {
	withCrypto(b, CryptoIPsecMB, BenchmarkReadLoopback4096)
}

func BenchmarkWriteLoopback64MB(b *testing.B) {
	withCrypto(b, CryptoIPsecMB, BenchmarkWriteLoopback64)
}

func BenchmarkWriteLoopback4096MB(b *testing.B) {
	withCrypto(b, CryptoIPsecMB, BenchmarkWriteLoopback4096)
}

// A core dropped with registered Go memory and a queued seal is collected
// without the runtime finding a leaked pin (its cleanup frees the batch).
func TestIPsecMBCoreCollected(t *testing.T) {
	for range 3 {
		cfg := testConfig("10.0.0.1", 1)
		cfg.Crypto = CryptoIPsecMB
		tx := newTestTx(4)
		c := newCore(t, cfg, tx)
		app := openApp(t, c, abi.ClassLow, 0)
		if _, err := c.RegisterRegion(app.id, make([]byte, 4096), abi.PermAll, testKr); err != nil {
			t.Fatal(err)
		}
		a, _ := c.ini.keys.Put(aesni.CacheKey{Region: 1}, aesni.Key{1})
		c.out.seal.sealRequest(a, tx.Buffer()[:16], make([]byte, 12), make([]byte, 64))
		if mbOf(c).batch.Len() != 1 {
			t.Fatal("seal not queued")
		}
	}
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// splitTx is a testTx whose memory is reported as two ranges, as a DPDK
// pool in two memzones is.
type splitTx struct{ *testTx }

func (t splitTx) TxMemory() [][]byte {
	h := len(t.mem) / 2
	return [][]byte{t.mem[:h:h], t.mem[h:]}
}

// With ipsec-mb, New registers every range of a Tx's memory with both
// batches (seals and opens), not only one of them.
func TestTxMemoryRangesRegistered(t *testing.T) {
	cfg := testConfig("10.0.0.1", 1)
	cfg.Crypto = CryptoIPsecMB
	tx := splitTx{newTestTx(8)}
	c := newCore(t, cfg, tx)
	for i, r := range tx.TxMemory() {
		for _, b := range []*mb.Batch{mbOf(c).batch, mbOf(c).opens} {
			if !b.Unregister(r) { // registered: true, and undone
				t.Errorf("range %d of %d not registered", i, len(tx.TxMemory()))
			}
		}
	}
}

// mbOf is c's ipsec-mb backend, nil when it seals with crypto/cipher.
func mbOf(c *Core) *mbCrypto {
	m, _ := c.out.seal.(*mbCrypto)
	return m
}

// TestSelfLoopNoCrossing: with ipsec-mb, frames an engine sends to itself
// are sealed at once by crypto/cipher (the self-loop copies them as they
// are emitted), so READs of its own region cost the core no cgo call; the
// same READs through the port (HairpinSelf) are sealed and opened in
// batches.
func TestSelfLoopNoCrossing(t *testing.T) {
	if !mbBuilt {
		t.Skip("ipsec-mb not built in")
	}
	for _, hairpin := range []bool{false, true} {
		withCrypto(t, CryptoIPsecMB, func(t *testing.T) {
			tx := newTestTx(256)
			cfg := testConfig("10.0.0.1", 1)
			cfg.HairpinSelf = hairpin
			c := newCore(t, cfg, tx)
			app := openApp(t, c, abi.ClassLow, 8)
			src := make([]byte, 64<<10)
			pattern(src, 0x33)
			dst := make([]byte, 64<<10)
			rs, _ := c.RegisterRegion(app.id, src, abi.PermAll, testKr)
			rd, _ := c.RegisterRegion(app.id, dst, abi.PermAll, testKr)
			now := int64(1000)
			for k, s := range app.slots {
				app.post(t, readCmd(s, ipOf("10.0.0.1"), rs, uint64(k)*4096, rd, uint64(k)*4096, 3000, uint64(k)))
			}
			var got []abi.Completion
			for k := 0; k < 20 && len(got) < len(app.slots); k++ {
				c.Poll(now)
				tx.deliverTo(now, c)
				now += 500
				got = append(got, app.completions()...)
			}
			if len(got) != len(app.slots) {
				t.Fatalf("hairpin %v: %d completions", hairpin, len(got))
			}
			for _, cp := range got {
				o := cp.Cookie * 4096
				if cp.Status != abi.StatusOK || !bytes.Equal(dst[o:o+3000], src[o:o+3000]) {
					t.Fatalf("hairpin %v: %+v, or its data differs", hairpin, cp)
				}
			}
			p, st := c.PathCounters(), c.Stats()
			if !hairpin && (p.Crossings != 0 || st.SelfLoop == 0) {
				t.Errorf("self-loop: %d crossings (want 0), %d frames looped", p.Crossings, st.SelfLoop)
			}
			if hairpin && p.Crossings == 0 {
				t.Errorf("through the port: no crossing counted")
			}
		})
	}
}
