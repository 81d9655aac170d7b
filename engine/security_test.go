package engine

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// secPair is a reader on core a and an owner on core b with one
// remote-readable region, the peer already resolved.
type secPair struct {
	*pair
	app, srv *testApp
	src, dst []byte
	rs, rd   abi.RegionID
}

func newSecPair(t *testing.T) *secPair {
	t.Helper()
	return newSecPairCrypto(t, testCrypto)
}

// newSecPairCrypto is newSecPair with both engines on seal backend crypto;
// each of edit changes the serving engine's config.
func newSecPairCrypto(t *testing.T, crypto string, edit ...func(*Config)) *secPair {
	t.Helper()
	ca, cb := pairConfigs(crypto)
	for _, e := range edit {
		e(&cb)
	}
	p := &secPair{pair: newPair(t, ca, cb)}
	p.app = openApp(t, p.a, abi.ClassLow, 8)
	p.srv = openApp(t, p.b, abi.ClassLow, 0)
	p.src, p.dst = make([]byte, 8192), make([]byte, 8192)
	pattern(p.src, 0x33)
	var err error
	if p.rs, err = p.b.RegisterRegion(p.srv.id, p.src, abi.PermRemoteRead, testKr); err != nil {
		t.Fatal(err)
	}
	if p.rd, err = p.a.RegisterRegion(p.app.id, p.dst, abi.PermAll, testKr); err != nil {
		t.Fatal(err)
	}
	p.read(t, 0, 1, abi.StatusOK) // resolves b's MAC
	return p
}

// read posts one read on slot k and runs both cores until it completes.
func (p *secPair) read(t *testing.T, k int, n uint32, want abi.Status) {
	t.Helper()
	p.readKey(t, k, n, [16]byte{}, want)
}

func (p *secPair) readKey(t *testing.T, k int, n uint32, key [16]byte, want abi.Status) {
	t.Helper()
	cmd := readCmd(p.app.slots[k], ipOf("10.0.0.2"), p.rs, 0, p.rd, 0, n, uint64(k))
	cmd.Key = key
	p.app.post(t, cmd)
	p.run()
	got := p.app.completions()
	if len(got) != 1 || got[0].Status != want {
		t.Fatalf("want one %v, got %+v", want, got)
	}
}

// requestFrame posts a read and returns its request frame, undelivered.
func (p *secPair) requestFrame(t *testing.T, k int, n uint32) []byte {
	t.Helper()
	p.app.post(t, readCmd(p.app.slots[k], ipOf("10.0.0.2"), p.rs, 0, p.rd, 0, n, uint64(k)))
	p.a.Poll(p.now)
	fr := p.ta.take()
	if len(fr) != 1 {
		t.Fatalf("want one request frame, got %d", len(fr))
	}
	return fr[0]
}

// serve hands frames to b and returns its answers.
func (p *secPair) serve(frames ...[]byte) [][]byte {
	for _, f := range frames {
		p.b.Receive(p.now, f)
	}
	p.b.Poll(p.now)
	return p.tb.take()
}

func TestWrongKeyFailsFast(t *testing.T) {
	p := newSecPair(t)
	p.dst[0] = 0xee
	for _, tc := range []struct {
		name string
		key  aesni.Key
	}{
		{"random key", aesni.Key{1, 2, 3}},
		{"region key itself", testKr},
		{"another PID's K_d", aesni.DeriveKey(testKr, p.app.ip, testPID+1, uint8(abi.OpRead))},
		{"another address's K_d", aesni.DeriveKey(testKr, [4]byte{10, 0, 0, 3}, testPID, uint8(abi.OpRead))},
		{"another op's K_d", aesni.DeriveKey(testKr, p.app.ip, testPID, uint8(abi.OpWrite))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.b.Stats().ReqAuthFailed
			p.readKey(t, 1, 64, tc.key, abi.StatusRemoteAuthFailure)
			if p.dst[0] != 0xee {
				t.Fatal("sink written by a failed op")
			}
			if got := p.b.Stats().ReqAuthFailed; got != before+1 {
				t.Fatalf("ReqAuthFailed %d, want %d", got, before+1)
			}
		})
	}
	p.readKey(t, 1, 64, [16]byte{}, abi.StatusOK) // the right key still works
	if !bytes.Equal(p.dst[:64], p.src[:64]) {
		t.Fatal("data mismatch")
	}
	if err := p.a.Audit(); err != nil {
		t.Fatal(err)
	}
}

// Every field of a request is authenticated: a flipped bit anywhere the
// AAD covers, or in the tag, gets REMOTE_AUTHENTICATION_FAILURE (never
// data); one in the source address or the IV's address makes the two
// differ, and the request is dropped unanswered before authentication.
func TestTamperedRequestRefused(t *testing.T) {
	p := newSecPair(t)
	req := p.requestFrame(t, 1, 64)
	mismatched := uint64(0)
	for bit := wire.AADOffset * 8; bit < (wire.PayloadOffset+wire.TrailerLen)*8; bit++ {
		bad := append([]byte(nil), req...)
		bad[bit/8] ^= 1 << (bit % 8)
		var f wire.Fields
		if _, err := wire.Decode(bad, &f); err != nil || f.DstIP != ipOf("10.0.0.2") || f.DstPort != p.b.cfg.UDPPort || f.Type != wire.TypeReadReq {
			continue // not a request for b any more: dropped before authentication
		}
		if binary.BigEndian.Uint32(f.IV[:4]) != f.SrcIP {
			mismatched++
			if ans := p.serve(bad); len(ans) != 0 || p.b.Stats().ReqIVMismatch != mismatched {
				t.Fatalf("bit %d (IV address %x, source %08x): %d answers, %d IV mismatches", bit, f.IV[:4], f.SrcIP, len(ans), p.b.Stats().ReqIVMismatch)
			}
			continue
		}
		ans := p.serve(bad)
		if len(ans) != 1 {
			t.Fatalf("bit %d: %d answers", bit, len(ans))
		}
		var af wire.Fields
		if _, err := wire.Decode(ans[0], &af); err != nil || af.Type != wire.TypeError || abi.Status(af.Status) != abi.StatusRemoteAuthFailure {
			t.Fatalf("bit %d: answer %+v (%v)", bit, af, err)
		}
	}
	if mismatched != 64 {
		t.Fatalf("%d bits of the two addresses flipped, want 64", mismatched)
	}
	if s := p.b.Stats(); s.ReqServed != 1 || s.ReqAuthFailed == 0 {
		t.Fatalf("served %d (want only the warm-up), auth failures %d", s.ReqServed, s.ReqAuthFailed)
	}
}

// Without replay detection (the layer underneath it; a sender whose
// window was forgotten), a replayed READ request is served again, but
// under fresh server counters: the attacker gets new ciphertext, never the
// old keystream, and the initiator drops the copies as stale.
func TestReplayedRequestFreshCiphertext(t *testing.T) {
	p := newSecPairCrypto(t, testCrypto, func(c *Config) { c.ReplayPeers = 0 })
	req := p.requestFrame(t, 1, 1000)
	first := p.serve(req)
	second := p.serve(req)
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("answers %d, %d", len(first), len(second))
	}
	if bytes.Equal(wire.IV(first[0]), wire.IV(second[0])) {
		t.Fatal("replay answered under the same IV")
	}
	if bytes.Equal(wire.Sealed(first[0], 1000), wire.Sealed(second[0], 1000)) {
		t.Fatal("replay answered with the same ciphertext")
	}
	if bytes.Contains(first[0], p.src[:64]) || bytes.Contains(second[0], p.src[:64]) {
		t.Fatal("plaintext on the wire")
	}
	p.a.Receive(p.now, first[0])
	p.a.Poll(p.now)
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("%+v", got)
	}
	p.a.Receive(p.now, second[0])
	if s := p.a.Stats(); s.RxStale != 1 {
		t.Fatalf("replayed answer not stale: %+v", s)
	}
}

// A response is bound to its request: a response sealed for an earlier op
// does not open for a later op, even re-tagged for it; a tampered response
// is dropped and counted and the op still completes with its genuine data.
func TestResponseBoundToRequest(t *testing.T) {
	p := newSecPair(t)
	old := p.serve(p.requestFrame(t, 1, 64))
	p.a.Receive(p.now, old[0])
	p.a.Poll(p.now)
	p.app.completions()

	req := p.requestFrame(t, 1, 64) // same slot, next op
	var rf wire.Fields
	wire.Decode(req, &rf)
	forged := append([]byte(nil), old[0]...)
	var of wire.Fields
	wire.Decode(forged, &of)
	of.Tag, of.DstPort = rf.Tag, rf.SrcPort // re-tagged for the new op, to its port: the AAD changes, and so does the curried IV
	wire.Encode(forged, &of, 64)
	copy(wire.Sealed(forged, 64), wire.Sealed(old[0], 64))
	clear(p.dst[:64])
	p.a.Receive(p.now, forged)
	if s := p.a.Stats(); s.RxAuthFailed != 1 {
		t.Fatalf("forged response not dropped: %+v", s)
	}
	genuine := p.serve(req)
	tampered := append([]byte(nil), genuine[0]...)
	wire.Sealed(tampered, 64)[5] ^= 1
	p.a.Receive(p.now, tampered)
	if s := p.a.Stats(); s.RxAuthFailed != 2 {
		t.Fatalf("tampered response not dropped: %+v", s)
	}
	p.a.Receive(p.now, genuine[0])
	p.a.Poll(p.now)
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("%+v", got)
	}
	if !bytes.Equal(p.dst[:64], p.src[:64]) {
		t.Fatal("data mismatch")
	}
}

// NACK and error answers are authenticated too: a forged one is dropped
// and the op ends by TIMEOUT, not by the forged status.
func TestForgedAnswersDropped(t *testing.T) {
	p := newSecPair(t)
	req := p.requestFrame(t, 1, 64)
	var rf wire.Fields
	wire.Decode(req, &rf)
	forge := func(ty wire.Type, st abi.Status, seal func(b []byte)) {
		b := make([]byte, MaxFrameBytes)
		f := wire.Fields{DstMAC: rf.SrcMAC, SrcMAC: rf.DstMAC, SrcIP: rf.DstIP, DstIP: rf.SrcIP,
			SrcPort: rf.DstPort, DstPort: rf.SrcPort, Type: ty, Status: uint8(st), PID: rf.PID, Tag: rf.Tag}
		f.IV[0], f.IV[11] = 10, 99
		n := wire.Encode(b, &f, 0)
		seal(b)
		p.a.Receive(p.now, b[:n])
	}
	wrong, _ := aesni.NewAEAD(aesni.Key{9})
	reserved, _ := aesni.NewReservedAEAD()
	forge(wire.TypeNack, 0, func(b []byte) {
		wrong.SealResponse(wire.Trailer(b, 0), nil, wire.IV(b), wire.AAD(b), rf.IV[:])
	})
	forge(wire.TypeError, abi.StatusRemoteBounds, func(b []byte) {
		wrong.SealResponse(wire.Trailer(b, 0), nil, wire.IV(b), wire.AAD(b), rf.IV[:])
	})
	forge(wire.TypeError, abi.StatusRemoteBounds, func(b []byte) { // reserved key only speaks for auth failures
		reserved.SealResponse(wire.Trailer(b, 0), nil, wire.IV(b), wire.AAD(b), rf.IV[:])
	})
	forge(wire.TypeError, abi.StatusRemoteAuthFailure, func(b []byte) { // not curried with the request's IV
		reserved.SealAuthFailure(wire.Trailer(b, 0), wire.IV(b), wire.AAD(b), make([]byte, 12))
	})
	if s := p.a.Stats(); s.RxAuthFailed != 4 {
		t.Fatalf("forged answers accepted: %+v", s)
	}
	p.now += int64(p.a.cfg.Timeout)
	p.a.Poll(p.now)
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusTimeout {
		t.Fatalf("%+v", got)
	}
	// The reserved key does speak for auth failures when curried right
	// (anyone can forge those: they are integrity, not authenticity).
	req = p.requestFrame(t, 1, 64)
	wire.Decode(req, &rf)
	forge(wire.TypeError, abi.StatusRemoteAuthFailure, func(b []byte) {
		reserved.SealAuthFailure(wire.Trailer(b, 0), wire.IV(b), wire.AAD(b), rf.IV[:])
	})
	p.a.Poll(p.now)
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("%+v", got)
	}
}

// Rekey: ops with K_d of the old K_r fail fast, ops with the new K_d
// succeed, and other regions of the same owner never notice.
func TestRekey(t *testing.T) {
	p := newSecPair(t)
	other := make([]byte, 4096)
	pattern(other, 0x77)
	ro, err := p.b.RegisterRegion(p.srv.id, other, abi.PermRemoteRead, testKr)
	if err != nil {
		t.Fatal(err)
	}
	readOther := func() {
		t.Helper()
		p.app.post(t, readCmd(p.app.slots[2], ipOf("10.0.0.2"), ro, 0, p.rd, 4096, 64, 2))
		p.run()
		if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
			t.Fatalf("other region: %+v", got)
		}
	}
	readOther()
	newKr := aesni.Key{0xfe, 0xed}
	newKd := aesni.DeriveKey(newKr, p.app.ip, testPID, uint8(abi.OpRead))
	if err := p.b.Rekey(p.srv.id, p.rs, newKr); err != nil {
		t.Fatal(err)
	}
	p.read(t, 1, 64, abi.StatusRemoteAuthFailure) // the old K_d
	readOther()
	p.readKey(t, 1, 64, newKd, abi.StatusOK)
	readOther()
	if !bytes.Equal(p.dst[:64], p.src[:64]) {
		t.Fatal("data mismatch")
	}
	// Only the owner may rekey, only a live region.
	intruder := openApp(t, p.b, abi.ClassLow, 0)
	if err := p.b.Rekey(intruder.id, p.rs, aesni.Key{}); err == nil {
		t.Fatal("another portal rekeyed the region")
	}
	if err := p.b.Rekey(p.srv.id, abi.MakeRegionID(p.rs.Index(), p.rs.Gen()+1), aesni.Key{}); err == nil {
		t.Fatal("stale region id rekeyed")
	}
	p.readKey(t, 1, 64, newKd, abi.StatusOK)
	if s := p.b.Stats(); s.Rekeys != 1 {
		t.Fatalf("Rekeys %d", s.Rekeys)
	}
}

// No nonce repeats within an engine: requests, every response chunk and
// every answer draw fresh counters, chunk nonces follow their offsets.
func TestNoncesUnique(t *testing.T) {
	p := newSecPair(t)
	seen := map[[12]byte]bool{}
	note := func(frames [][]byte) {
		for _, f := range frames {
			iv := [12]byte(wire.IV(f))
			if seen[iv] {
				t.Fatalf("nonce %x repeated", iv)
			}
			seen[iv] = true
		}
	}
	for k := 0; k < 20; k++ {
		req := p.requestFrame(t, 1, uint32(1+k*211))
		note([][]byte{req})
		ans := p.serve(req, req) // replayed once
		note(ans)
		for _, a := range ans {
			p.a.Receive(p.now, a)
		}
		p.a.Poll(p.now)
		p.app.completions()
	}
	note(p.serve(p.requestFrame(t, 1, 64)[:wire.PayloadOffset+3])) // malformed: dropped, no answer
}

// rekeyCmd asks the engine at 10.0.0.2 to install the key held at
// offset off of the app's region rd, authorised by key (K_d for REKEY).
func (p *secPair) rekeyCmd(k int, off uint64, key aesni.Key) *abi.Command {
	return &abi.Command{Op: abi.OpRekey, Slot: p.app.slots[k], Cookie: 9, RemoteAddr: ipOf("10.0.0.2"),
		RemoteRegion: p.rs, LocalRegion: p.rd, LocalOffset: off, Length: aesni.KeySize, Key: key}
}

// Remote REKEY (paper §5.2): authorised by K_d for the REKEY op type, the
// new key encrypted on the wire; readers with the old K_d then fail fast,
// the new K_d works, a replay of the REKEY request changes nothing.
func TestRemoteRekey(t *testing.T) {
	p := newSecPair(t)
	editRegion(p.b, p.rs, func(r *region) { r.perm |= abi.PermRemoteRekey })
	newKr := aesni.Key{0xab, 0xcd, 0xef, 1}
	copy(p.dst[4096:], newKr[:])
	rekeyKd := aesni.DeriveKey(testKr, p.app.ip, testPID, uint8(abi.OpRekey))

	// K_d for READ does not authorise a REKEY.
	p.app.post(t, p.rekeyCmd(3, 4096, aesni.DeriveKey(testKr, p.app.ip, testPID, uint8(abi.OpRead))))
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("READ key rekeyed: %+v", got)
	}
	p.read(t, 1, 64, abi.StatusOK)

	// Four hops, like a WRITE: ① request, ② pull, ③ the key (sealed), ④ ack.
	p.app.post(t, p.rekeyCmd(3, 4096, rekeyKd))
	var sent [][]byte
	for k := 0; k < 4; k++ {
		p.a.Poll(p.now)
		for _, fr := range p.ta.take() {
			sent = append(sent, fr)
			p.b.Receive(p.now, fr)
		}
		p.b.Poll(p.now)
		p.tb.deliverTo(p.now, p.a)
	}
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK || got[0].Op != abi.OpRekey {
		t.Fatalf("rekey: %+v", got)
	}
	if len(sent) != 2 || frameType(sent[0]) != wire.TypeRekeyReq || frameType(sent[1]) != wire.TypeWriteData {
		t.Fatalf("want a rekey request and one data frame, got %d frames", len(sent))
	}
	for _, fr := range sent {
		if bytes.Contains(fr, newKr[:4]) {
			t.Fatal("the new key is on the wire in clear")
		}
	}
	req := sent[:1]
	p.read(t, 1, 64, abi.StatusRemoteAuthFailure)
	p.readKey(t, 1, 64, aesni.DeriveKey(newKr, p.app.ip, testPID, uint8(abi.OpRead)), abi.StatusOK)

	// A replay of the REKEY request no longer authenticates (its K_d was
	// derived from the key it replaced); a replay of its data is stale.
	if ans := p.serve(sent[1]); len(ans) != 0 || p.b.Stats().RxStale == 0 {
		t.Fatalf("replayed rekey data answered: %d frames", len(ans))
	}
	ans := p.serve(req[0])
	var af wire.Fields
	if _, err := wire.Decode(ans[0], &af); err != nil || abi.Status(af.Status) != abi.StatusRemoteAuthFailure {
		t.Fatalf("replayed rekey: %+v %v", af, err)
	}
	p.readKey(t, 1, 64, aesni.DeriveKey(newKr, p.app.ip, testPID, uint8(abi.OpRead)), abi.StatusOK)
	if s := p.b.Stats(); s.RemoteRekeys != 1 || s.Rekeys != 1 {
		t.Fatalf("rekeys %d remote %d", s.Rekeys, s.RemoteRekeys)
	}

	// Without abi.PermRemoteRekey: REMOTE_PERMISSION, the key stays.
	editRegion(p.b, p.rs, func(r *region) { r.perm &^= abi.PermRemoteRekey })
	p.app.post(t, p.rekeyCmd(3, 4096, aesni.DeriveKey(newKr, p.app.ip, testPID, uint8(abi.OpRekey))))
	p.run()
	if got := p.app.completions(); len(got) != 1 || got[0].Status != abi.StatusRemotePermission {
		t.Fatalf("rekey without permission: %+v", got)
	}
	p.readKey(t, 1, 64, aesni.DeriveKey(newKr, p.app.ip, testPID, uint8(abi.OpRead)), abi.StatusOK)

	// Bad REKEY commands fail locally.
	bad := p.rekeyCmd(3, 4096, rekeyKd)
	bad.Length = 32
	p.app.post(t, bad)
	bad = p.rekeyCmd(3, 8190, rekeyKd)
	p.app.post(t, bad)
	p.run()
	if got := p.app.completions(); len(got) != 2 || got[0].Status != abi.StatusBadCommand || got[1].Status != abi.StatusLocalBounds {
		t.Fatalf("bad rekey commands: %+v", got)
	}
	if err := p.a.Audit(); err != nil {
		t.Fatal(err)
	}
}

// A REKEY whose key never reaches the server is never installed, and the
// initiator reports TIMEOUT only after the server gave up on it: the old
// key keeps working, and a late copy of the key changes nothing.
func TestRemoteRekeyLostKeyNeverInstalls(t *testing.T) {
	p := newSecPair(t)
	editRegion(p.b, p.rs, func(r *region) { r.perm |= abi.PermRemoteRekey })
	newKr := aesni.Key{0x11, 0x22, 0x33, 4}
	copy(p.dst[4096:], newKr[:])
	p.app.post(t, p.rekeyCmd(3, 4096, aesni.DeriveKey(testKr, p.app.ip, testPID, uint8(abi.OpRekey))))
	var late []byte
	for k := 0; k < 3; k++ {
		p.a.Poll(p.now)
		for _, fr := range p.ta.take() {
			if frameType(fr) == wire.TypeWriteData {
				late = fr // lost
				continue
			}
			p.b.Receive(p.now, fr)
		}
		p.b.Poll(p.now)
		p.tb.deliverTo(p.now, p.a)
	}
	if late == nil {
		t.Fatal("no key frame sent")
	}
	var expired bool
	for k := 0; k < 100; k++ {
		p.now += 50_000
		p.b.Poll(p.now)
		expired = expired || p.b.Stats().PullsExpired == 1
		p.a.Poll(p.now)
		if got := p.app.completions(); len(got) > 0 {
			if len(got) != 1 || got[0].Status != abi.StatusTimeout || !expired {
				t.Fatalf("completions %+v (server expired: %v)", got, expired)
			}
			break
		}
	}
	p.b.Receive(p.now, late)
	p.b.Poll(p.now)
	p.read(t, 1, 64, abi.StatusOK) // the old key still works
	if s := p.b.Stats(); s.RemoteRekeys != 0 {
		t.Fatalf("rekeys %d", s.RemoteRekeys)
	}
}
