package e2e

// Attacks from the network against real engines (rmad on net_tap ports
// joined by a Linux bridge): engine A runs the reader application, B the
// owner of the region read, C a bystander owning a region with the same id.
// The attacker has a port of its own on the bridge (a veth, MAC
// 02:89:00:00:00:66, IPv4 10.98.0.66) and, where the threat needs an
// on-path position, raw access to each engine's link (AF_PACKET sockets on
// the tap interfaces: it sees every frame and injects frames the engine
// receives as if from the wire, with any source). Counters are the
// engines' (portal.Stats, `rmactl stats`). Every subtest also checks that
// the reader's legitimate reads keep completing OK with the right bytes.
// WRITE hops are numbered as in engine/pull.go: (1) write request, (2)
// pull, (3) data, (4) ack; the WRITE subtests are in attack_write_test.go.
//
//	threat                                          outcome                                              counter
//	----------------------------------------------  ---------------------------------------------------  ------------------------------
//	forged READ request (random key, K_r as key,    REMOTE_AUTHENTICATION_FAILURE answer sealed with     req_auth_failed (server)
//	  stolen K_d from another address, unknown      the reserved key, tied to the request IV; no data,
//	  region)                                       nothing served
//	replayed READ request                           dropped unanswered once it authenticated: B has      req_replayed (server)
//	                                                seen its IV counter (engine/replay.go); nothing
//	                                                served, nothing reaches the initiator
//	tampered response (payload, tag, IV, PID,       dropped; the op completes OK with the genuine        rx_auth_failed (initiator)
//	  region, offset, status, flags, src port)      chunks, right bytes
//	tampered IPv4 TTL (not 0) / ID / checksum of a  accepted: outside the AAD, meaningless to the        -
//	  genuine response or request                   engine (IPv4 addresses are authenticated)
//	forged answer to an outstanding op (data, NACK, dropped; the op completes OK when the frozen          rx_auth_failed (initiator)
//	  error status, under a random key, without     server thaws; no forged byte reaches the sink
//	  the request IV, NACK/error under the
//	  reserved key, auth failure with a wrong IV)
//	forged answer with an impossible shape (error   dropped before authentication                        rx_dropped (initiator)
//	  status OK or local, ACK for a READ, chunk
//	  misaligned or beyond the op)
//	forged answer naming another op (other source   dropped                                              rx_stale (initiator)
//	  IPv4, other sequence)
//	forged REMOTE_AUTHENTICATION_FAILURE under the  ACCEPTED by design (the reserved key is public): the  completed.REMOTE_AUTHENTICATION_
//	  reserved key with the sniffed request IV      op fails at once, nothing is written; the genuine    FAILURE, then rx_stale
//	                                                answers arriving later are stale. On-path DoS only.
//	request misdirected to another engine (dst      that engine answers REMOTE_AUTHENTICATION_FAILURE    req_auth_failed (C),
//	  MAC+IPv4 rewritten, tag kept)                 to the initiator, which drops it (wrong source);     rx_stale (initiator)
//	                                                the outstanding op still completes OK
//	frame not for us (MAC xor IPv4 of another       dropped, no answer                                   rx_dropped
//	  engine, broadcast MAC, wrong UDP port)
//	captured response re-addressed to another       dropped (no such op there)                           rx_stale
//	  engine
//	captured request with region id, PID, offset,   REMOTE_AUTHENTICATION_FAILURE (the tag covers the    req_auth_failed (server),
//	  length or IV rewritten (tag kept)             header); the initiator drops the answer              rx_stale (initiator)
//	replayed WRITE request (1) after its write      B pulls again under a fresh IV from A, which no      pulls_issued, pulls_expired (B),
//	  completed (the range changed since)           longer has the op (stale there); the pull expires    rx_stale (A)
//	                                                uncommitted, the range keeps its bytes
//	replayed WRITE data (3): as captured; aimed at  stale (its pull ended); curried with another         rx_stale, rx_auth_failed (B)
//	  a live pull (handle, tag rewritten)           pull's IV, it fails authentication: nothing
//	                                                committed
//	replayed ack (4)                                stale (the op ended)                                 rx_stale (A)
//	replayed (1) while a second write to the same   all pulled; A answers its live op's first pull       writes_committed +1, pulls_expired
//	  range is in flight, and that write's (1)      only; that write commits once, the other pulls       (B); rx_stale, rx_dropped (A)
//	  duplicated                                    expire uncommitted
//	80 replays of (1) at once (the 64 pulls they    B pulls them; a genuine write behind them reclaims   pulls_issued, pulls_expired (B);
//	  fill B's window), then a genuine write        their idle pulls after pull_idle_timeout (TIMEOUT/4) rx_stale (A)
//	                                                and commits well before TIMEOUT; the rest expire
//	captured WRITE request with offset, length,     REMOTE_AUTHENTICATION_FAILURE, nothing pulled        req_auth_failed (B)
//	  region, PID or IV rewritten, or turned into
//	  a READ or REKEY request
//	tampered WRITE data (payload, tag, IV, offset,  dropped; the write commits its genuine data once     rx_auth_failed (B)
//	  status, flags, length) or forged (attacker's  all of it authenticated
//	  key, request IV or no IV curried)
//	WRITE data with PID, tag, pull handle, source   dropped                                              rx_stale (B)
//	  port or address changed
//	WRITE data misaligned, beyond the write, wrong  dropped                                              rx_dropped (B)
//	  UDP port
//	WRITE data chunk duplicated                     dropped, committed once                              rx_duplicate (B)
//	forged ack or NACK, another write's ack         dropped; the write completes OK                      rx_auth_failed (A)
//	  re-tagged, for a pulled write
//	second pull for a pulled write                  dropped (an op is pulled once)                       rx_dropped (A)
//	WRITE data held until the initiator's TIMEOUT,  B's pull expired first (the initiator's deadline     pulls_expired (B)
//	  then delivered                                is later): never committed
//	forged REMOTE_AUTHENTICATION_FAILURE for a      ACCEPTED, an engine bug: reported failed, then       completed.REMOTE_AUTHENTICATION_
//	  pulled WRITE or REKEY, curried with the       committed when the data arrives; it must be          FAILURE (A), writes_committed (B)
//	  pull's IV (in clear in the pull's header)     dropped (TestAttackForgedAuthFailureAfterPull)
//	truncated frames, IPv4/UDP/OneRMA lengths       dropped silently, no answer                          rx_dropped
//	  lying, bad version / type / reserved word,
//	  payload on a request, bad IPv4 version/IHL/
//	  protocol, non-IPv4 EtherType, VLAN tag,
//	  short ARP
//	IPv4 options, fragments, TTL 0                  dropped silently, no answer                          rx_ip_options, rx_fragments,
//	                                                                                                     rx_ttl_zero
//	frame longer than the port's MTU (jumbo on the  never reaches the engine (the kernel or the tap PMD  - (rx_frames unchanged)
//	  tap)                                          drops it), no answer
//	bad IPv4 header checksum only                   not checked (the tag covers the addresses): handled  req_auth_failed for a forged
//	                                                like the same frame with a good checksum             request
//	flood: 100k garbage, mutated and forged frames  every frame accounted for (sum of the counters =     rx_dropped + req_auth_failed +
//	  and answers with random headers               frames sent); ≥ 1000 concurrent legit reads all OK   rx_stale + rx_auth_failed +
//	                                                with the right bytes, each served once               rx_duplicate + the IPv4 and
//	                                                                                                     ICMP counters (server)

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/rawnet"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
	"github.com/onerma/onerma/wire"
)

var (
	atkIPC  = netip.MustParseAddr("10.98.0.3")
	atkIPX  = netip.MustParseAddr("10.98.0.66") // the attacker
	atkMACA = wire.MAC{0x02, 0x89, 0, 0, 0, 0x01}
	atkMACB = wire.MAC{0x02, 0x89, 0, 0, 0, 0x02}
	atkMACC = wire.MAC{0x02, 0x89, 0, 0, 0, 0x03}
	atkMACX = wire.MAC{0x02, 0x89, 0, 0, 0, 0x66}
)

const atkPort = 4792 // every engine's request port (and core 0's answer port)

// attackBed is three engines on a bridge, their applications, and the
// attacker's raw ports.
type attackBed struct {
	a, b, c               *testbed.Engine
	pa, pb, pc            *portal.Portal
	rb, rb2, rc           *portal.Region // rb, rb2 on B; rc on C
	kd                    aesni.Key      // the reader's K_d for rb
	slots                 []abi.SlotID   // legitimate reads
	lsink                 *portal.Region
	aslot                 abi.SlotID // the op the attacks revolve around
	asink                 *portal.Region
	ifA, ifB, ifC, ifX    string // tap interfaces; the attacker's veth end
	br, vethBr            string
	tapA, tapB, tapC, atk *rawnet.Port
	epA, epB, epC, epX    rawnet.Endpoint
	rng                   *rand.Rand
	ivCtr                 uint64       // the attacker's IV counter
	legitDone             int          // legitimate reads verified so far
	progress              atomic.Int64 // the same, counted as they complete
}

func atkRun(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func newAttackBed(t *testing.T) *attackBed {
	needEngines(t)
	tag := strconv.Itoa(os.Getpid() % 1000)
	tb := &attackBed{
		ifA: "orxa" + tag, ifB: "orxb" + tag, ifC: "orxc" + tag, ifX: "orxw" + tag,
		br: "orxbr" + tag, vethBr: "orxv" + tag,
		epA: rawnet.Endpoint{MAC: atkMACA, IP: ipA, Port: atkPort},
		epB: rawnet.Endpoint{MAC: atkMACB, IP: ipB, Port: atkPort},
		epC: rawnet.Endpoint{MAC: atkMACC, IP: atkIPC, Port: atkPort},
		epX: rawnet.Endpoint{MAC: atkMACX, IP: atkIPX, Port: atkPort},
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	tb.rng = rand.New(rand.NewPCG(seed, seed>>7))
	dir := t.TempDir()
	// TIMEOUT is at most 1 s (relaxed): ops held up by a frozen server or
	// a man in the middle are released well within it.
	mk := func(name, ip, iface string, mac wire.MAC, extra []string) *testbed.Engine {
		o := testbed.Tap(rmadBin, dir, name+tag, ip, iface, netMAC(mac))
		o.Extra = append(append(o.Extra, relaxed...), extra...)
		return start(t, o)
	}
	tb.a = mk("atk-a", ipA.String(), tb.ifA, atkMACA, nil)
	tb.b = mk("atk-b", ipB.String(), tb.ifB, atkMACB, nil)
	tb.c = mk("atk-c", atkIPC.String(), tb.ifC, atkMACC, nil)

	// The bridge and the attacker's veth, IPv6 off everywhere (no router
	// solicitations or MLD reports reaching the engines). The attacker's
	// end keeps its kernel MAC, so the host stack never takes frames
	// addressed to the attacker's MAC as its own.
	fail := func(err error) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("cannot build the attack network:", err)
	}
	cleanup := func() {
		exec.Command("ip", "link", "del", tb.br).Run()
		exec.Command("ip", "link", "del", tb.vethBr).Run()
	}
	cleanup()
	t.Cleanup(cleanup)
	steps := [][]string{
		// No multicast snooping: a snooping bridge joins the all-snoopers
		// group and sends IGMP reports to every port (to the engines).
		{"ip", "link", "add", tb.br, "type", "bridge", "stp_state", "0", "forward_delay", "0", "mcast_snooping", "0"},
		{"ip", "link", "add", tb.vethBr, "type", "veth", "peer", "name", tb.ifX},
	}
	for _, s := range steps {
		if err := atkRun(s...); err != nil {
			fail(err)
		}
	}
	for _, i := range []string{tb.br, tb.vethBr, tb.ifX, tb.ifA, tb.ifB, tb.ifC} {
		exec.Command("sysctl", "-qw", "net.ipv6.conf."+i+".disable_ipv6=1").Run()
		exec.Command("sysctl", "-qw", "net.ipv4.conf."+i+".forwarding=0").Run()
	}
	for _, i := range []string{tb.ifA, tb.ifB, tb.ifC, tb.vethBr} {
		if err := atkRun("ip", "link", "set", i, "master", tb.br); err != nil {
			fail(err)
		}
	}
	for _, i := range []string{tb.ifA, tb.ifB, tb.ifC, tb.vethBr, tb.ifX, tb.br} {
		if err := atkRun("ip", "link", "set", i, "up"); err != nil {
			fail(err)
		}
	}
	var err error
	for _, p := range []struct {
		dst   **rawnet.Port
		iface string
	}{{&tb.tapA, tb.ifA}, {&tb.tapB, tb.ifB}, {&tb.tapC, tb.ifC}, {&tb.atk, tb.ifX}} {
		if *p.dst, err = rawnet.Open(p.iface); err != nil {
			t.Fatal(err)
		}
		port := *p.dst
		t.Cleanup(func() { port.Close() })
	}

	tb.pa, tb.pb, tb.pc = dial(t, tb.a, "reader"), dial(t, tb.b, "owner"), dial(t, tb.c, "bystander")
	tb.rb = ownerRegion(t, tb.pb, 64<<10, abi.PermRemoteRead)
	tb.rc = ownerRegion(t, tb.pc, 64<<10, abi.PermRemoteRead)
	tb.rb2 = ownerRegion(t, tb.pb, 4096, abi.PermRemoteRead)
	tb.kd = kdFor(tb.rb, tb.pa)
	if tb.slots, err = tb.pa.AllocSlots(9); err != nil {
		t.Fatal(err)
	}
	tb.aslot, tb.slots = tb.slots[8], tb.slots[:8]
	if tb.lsink, err = tb.pa.RegisterRegion(8*4096, abi.PermLocalWrite|abi.PermLocalRead); err != nil {
		t.Fatal(err)
	}
	if tb.asink, err = tb.pa.RegisterRegion(4*4096, abi.PermLocalWrite|abi.PermLocalRead); err != nil {
		t.Fatal(err)
	}
	if tb.rc.ID() != tb.rb.ID() {
		t.Logf("note: C's region id %#x differs from B's %#x", tb.rc.ID(), tb.rb.ID())
	}
	// Warm up: ARP resolved, the bridge has learnt every engine's MAC and
	// (from a first forged request) the attacker's.
	tb.legit(t, 16)
	req := tb.forgedRequest(tb.epX, tb.epB, 4242, tb.rb.ID(), 0, 64, tb.randKey())
	if err := tb.atk.Inject(req); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.atk.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Tag == tagOf(req) })); err != nil {
		t.Fatal("no answer to the attacker's first request:", err)
	}
	return tb
}

func netMAC(m wire.MAC) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

func (tb *attackBed) randKey() aesni.Key {
	var k aesni.Key
	binary.LittleEndian.PutUint64(k[0:8], tb.rng.Uint64())
	binary.LittleEndian.PutUint64(k[8:16], tb.rng.Uint64())
	return k
}

// forgedRequest builds a READ request from src to dst sealed with key.
func (tb *attackBed) forgedRequest(src, dst rawnet.Endpoint, pid uint32, region abi.RegionID, off uint64, length uint32, key aesni.Key) []byte {
	tb.ivCtr++
	f := rawnet.Fields(src, dst)
	f.Type, f.PID, f.Tag = wire.TypeReadReq, pid, tb.rng.Uint64()
	f.Region, f.Length, f.Offset = uint32(region), length, off
	f.IV = rawnet.Nonce(src.IP, tb.ivCtr)
	b := rawnet.Build(&f, 0)
	rawnet.SealRequest(b, key)
	return b
}

// forgedAnswer builds an answer from src to dst for the request req
// (its tag and PID), of type typ with status st and a payload of plen
// random bytes at offset off, sealed with key (curried with reqIV), or
// with the reserved key when reservedKey is set.
func (tb *attackBed) forgedAnswer(src, dst rawnet.Endpoint, req *wire.Fields, typ wire.Type, st abi.Status, off uint64, plen int,
	key aesni.Key, reservedKey bool, reqIV []byte) []byte {
	tb.ivCtr++
	f := rawnet.Fields(src, dst)
	f.Type, f.Status, f.PID, f.Tag = typ, uint8(st), req.PID, req.Tag
	f.Length, f.Offset = uint32(plen), off
	f.IV = rawnet.Nonce(src.IP, tb.ivCtr)
	b := rawnet.Build(&f, plen)
	plain := make([]byte, plen)
	for i := range plain {
		plain[i] = byte(tb.rng.Uint32())
	}
	if reservedKey {
		rawnet.SealAuthFailure(b, reqIV)
	} else {
		rawnet.SealAnswer(b, key, plain, reqIV)
	}
	return b
}

func tagOf(frame []byte) uint64 {
	f, _, _ := rawnet.Parse(frame)
	return f.Tag
}

func parse(t *testing.T, frame []byte) wire.Fields {
	t.Helper()
	f, _, err := rawnet.Parse(frame)
	if err != nil {
		t.Fatalf("captured frame does not decode: %v", err)
	}
	return f
}

// On a tap interface, frames the host sends (Out) go to the engine; the
// others come from it.
func fromEngine(pred func(*wire.Fields) bool) func(*rawnet.Frame) bool {
	return oneRMAFrame(false, pred)
}
func toEngine(pred func(*wire.Fields) bool) func(*rawnet.Frame) bool { return oneRMAFrame(true, pred) }

func oneRMAFrame(out bool, pred func(*wire.Fields) bool) func(*rawnet.Frame) bool {
	return func(fr *rawnet.Frame) bool {
		if fr.Out != out {
			return false
		}
		f, _, err := rawnet.Parse(fr.Data)
		return err == nil && (pred == nil || pred(&f))
	}
}

// inject sends frames through p, failing t on an error.
func inject(t *testing.T, p *rawnet.Port, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		if err := p.Inject(f); err != nil {
			t.Fatal(err)
		}
	}
}

// chunks collects the READ response chunks of tag seen on p in direction
// out until they add up to total bytes, sorted by offset.
func chunks(t *testing.T, p *rawnet.Port, out bool, tag uint64, total int) []rawnet.Frame {
	t.Helper()
	return chunksOf(t, p, out, wire.TypeReadResp, tag, total)
}

// chunksOf is chunks for frames of type typ (READ responses, WRITE data).
func chunksOf(t *testing.T, p *rawnet.Port, out bool, typ wire.Type, tag uint64, total int) []rawnet.Frame {
	t.Helper()
	var got []rawnet.Frame
	sum := 0
	deadline := time.Now().Add(5 * time.Second)
	for sum < total {
		f, err := p.Expect(time.Until(deadline), oneRMAFrame(out, func(f *wire.Fields) bool {
			return f.Type == typ && f.Tag == tag
		}))
		if err != nil {
			t.Fatalf("chunks of type %d, tag %#x: %d of %d bytes: %v", typ, tag, sum, total, err)
		}
		got = append(got, f)
		sum += rawnet.PayloadLen(f.Data)
	}
	if sum != total {
		t.Fatalf("response chunks of tag %#x add up to %d bytes, want %d", tag, sum, total)
	}
	sort.Slice(got, func(i, j int) bool { return parse(t, got[i].Data).Offset < parse(t, got[j].Data).Offset })
	return got
}

// counter names one engine counter.
type counter struct {
	name string
	get  func(*ctlmsg.Stats) uint64
}

var (
	cRxDropped     = counter{"rx_dropped", func(s *ctlmsg.Stats) uint64 { return s.RxDropped }}
	cRxAuthFailed  = counter{"rx_auth_failed", func(s *ctlmsg.Stats) uint64 { return s.RxAuthFailed }}
	cRxStale       = counter{"rx_stale", func(s *ctlmsg.Stats) uint64 { return s.RxStale }}
	cRxDuplicate   = counter{"rx_duplicate", func(s *ctlmsg.Stats) uint64 { return s.RxDuplicate }}
	cRxFrames      = counter{"rx_frames", func(s *ctlmsg.Stats) uint64 { return s.RxFrames }}
	cReqAuthFailed = counter{"req_auth_failed", func(s *ctlmsg.Stats) uint64 { return s.ReqAuthFailed }}
	cReqIVMismatch = counter{"req_iv_mismatch", func(s *ctlmsg.Stats) uint64 { return s.ReqIVMismatch }}
	cReqServed     = counter{"req_served", func(s *ctlmsg.Stats) uint64 { return s.ReqServed }}
	cReqReplayed   = counter{"req_replayed", func(s *ctlmsg.Stats) uint64 { return s.ReqReplayed }}
	cReqErrors     = counter{"req_errors", func(s *ctlmsg.Stats) uint64 { return s.ReqErrors }}
	cRxIPOptions   = counter{"rx_ip_options", func(s *ctlmsg.Stats) uint64 { return s.RxIPOptions }}
	cRxFragments   = counter{"rx_fragments", func(s *ctlmsg.Stats) uint64 { return s.RxFragments }}
	cRxTTLZero     = counter{"rx_ttl_zero", func(s *ctlmsg.Stats) uint64 { return s.RxTTLZero }}
	cAuthFailCpl   = counter{"completed.REMOTE_AUTHENTICATION_FAILURE", func(s *ctlmsg.Stats) uint64 {
		return s.Completed[abi.StatusRemoteAuthFailure.String()]
	}}
)

// cNotOneRMA: every frame addressed to the engine that is not OneRMA's
// ends in one of these, or in rx_dropped.
var cNotOneRMA = []counter{cRxIPOptions, cRxFragments, cRxTTLZero,
	{"rx_icmp_malformed", func(s *ctlmsg.Stats) uint64 { return s.RxICMPMalformed }},
	{"rx_icmp_other", func(s *ctlmsg.Stats) uint64 { return s.RxICMPOther }},
	{"icmp_echo_replies", func(s *ctlmsg.Stats) uint64 { return s.ICMPEchoReplies }},
	{"icmp_rate_limited", func(s *ctlmsg.Stats) uint64 { return s.ICMPRateLimited }},
	{"icmp_echo_too_big", func(s *ctlmsg.Stats) uint64 { return s.ICMPEchoTooBig }},
	{"icmp_frag_needed", func(s *ctlmsg.Stats) uint64 { return s.ICMPFragNeeded }}}

type delta struct {
	c counter
	n uint64
}

func stats(t *testing.T, p *portal.Portal) *ctlmsg.Stats {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// expect waits (5 s at most) until each counter of the engine behind p has
// grown by at least its n since base, lets the engine settle, and then
// requires exact growth.
func expect(t *testing.T, who string, p *portal.Portal, base *ctlmsg.Stats, ds ...delta) *ctlmsg.Stats {
	t.Helper()
	var s *ctlmsg.Stats
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s = stats(t, p)
		ok := true
		for _, d := range ds {
			ok = ok && d.c.get(s)-d.c.get(base) >= d.n
		}
		if ok || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(100 * time.Millisecond)
	s = stats(t, p)
	for _, d := range ds {
		if got := d.c.get(s) - d.c.get(base); got != d.n {
			t.Errorf("%s: %s +%d, want +%d", who, d.c.name, got, d.n)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return s
}

// noCompletion checks that the reader has no completion pending.
func (tb *attackBed) noCompletion(t *testing.T, why string) {
	t.Helper()
	cpl := make([]abi.Completion, 4)
	if n, err := tb.pa.Poll(cpl); n != 0 || err != nil {
		t.Fatalf("%s: unexpected completion %+v (%v)", why, cpl[0], err)
	}
}

// legit performs n verified reads of B's region by the reader.
func (tb *attackBed) legit(t *testing.T, n int) {
	t.Helper()
	if _, err := tb.legitReads(n, nil); err != nil {
		t.Fatal(err)
	}
}

var legitSizes = []uint32{4096, 1, 64, 1000, 1409, 2817, 4095, 128, 1408, 2048}

// legitReads reads B's region with 8 ops in flight, verifying every byte,
// until n reads are done and stop (if any) is closed. It returns how many.
func (tb *attackBed) legitReads(n int, stop <-chan struct{}) (int, error) {
	p, rid, size := tb.pa, tb.rb.ID(), tb.rb.Size()
	type op struct {
		off uint64
		len uint32
	}
	ops := make([]op, len(tb.slots))
	done, posted := 0, 0
	stopped := func() bool {
		if stop == nil {
			return true
		}
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	post := func(k int) error {
		i := tb.legitDone + posted
		l := legitSizes[i%len(legitSizes)]
		off := (uint64(i)*7919 + 13) % (size - uint64(l))
		ops[k] = op{off, l}
		posted++
		return p.Post(&portal.Op{
			Type: portal.OpRead, Slot: tb.slots[k], Cookie: uint64(k),
			Remote: ipB, RemoteRegion: rid, RemoteOffset: off, Key: tb.kd,
			Local: tb.lsink, LocalOffset: uint64(k) * 4096, Length: l,
		})
	}
	inflight := 0
	for k := range tb.slots {
		if posted >= n && stopped() {
			break
		}
		if err := post(k); err != nil {
			return done, err
		}
		inflight++
	}
	p.Flush()
	cpl := make([]abi.Completion, len(tb.slots))
	for inflight > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := p.Wait(ctx, cpl)
		cancel()
		if err != nil {
			return done, fmt.Errorf("legitimate reads: no completion within 10 s after %d: %v", done, err)
		}
		for _, c := range cpl[:m] {
			inflight--
			k := int(c.Cookie)
			if k < 0 || k >= len(ops) || c.Status != abi.StatusOK || c.Length != ops[k].len {
				return done, fmt.Errorf("legitimate read %d: %+v", done, c)
			}
			got := tb.lsink.Bytes()[k*4096 : k*4096+int(ops[k].len)]
			for i, b := range got {
				if b != pattern(ops[k].off+uint64(i)) {
					return done, fmt.Errorf("legitimate read of %d B at %d: byte %d is %#x, want %#x",
						ops[k].len, ops[k].off, i, b, pattern(ops[k].off+uint64(i)))
				}
			}
			done++
			tb.progress.Add(1)
			if posted < n || !stopped() {
				if err := post(k); err != nil {
					return done, err
				}
				inflight++
			}
		}
		p.Flush()
	}
	tb.legitDone += done
	return done, nil
}

// readOp posts one 4 KB read of B's region at off into asink at sinkOff
// and returns the request the reader's engine sent, as captured on A's
// link.
func (tb *attackBed) readOp(t *testing.T, off uint64, sinkOff uint64, cookie uint64) rawnet.Frame {
	t.Helper()
	tb.tapA.Drain()
	if err := tb.pa.Submit(&portal.Op{
		Type: portal.OpRead, Slot: tb.aslot, Cookie: cookie,
		Remote: ipB, RemoteRegion: tb.rb.ID(), RemoteOffset: off, Key: tb.kd,
		Local: tb.asink, LocalOffset: sinkOff, Length: 4096,
	}); err != nil {
		t.Fatal(err)
	}
	req, err := tb.tapA.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool {
		return f.Type == wire.TypeReadReq && f.Offset == off && f.DstIP == binary.BigEndian.Uint32(ipB.AsSlice())
	}))
	if err != nil {
		t.Fatal("the reader's request:", err)
	}
	return req
}

// checkOp waits for the completion of the op of readOp and verifies its
// bytes.
func (tb *attackBed) checkOp(t *testing.T, off, sinkOff, cookie uint64) {
	t.Helper()
	c := waitOne(t, tb.pa, 10*time.Second)
	if c.Status != abi.StatusOK || c.Cookie != cookie || c.Length != 4096 {
		t.Fatalf("the attacked op: %+v, want OK", c)
	}
	got := tb.asink.Bytes()[sinkOff : sinkOff+4096]
	for i, b := range got {
		if b != pattern(off+uint64(i)) {
			t.Fatalf("the attacked op: byte %d is %#x, want %#x", i, b, pattern(off+uint64(i)))
		}
	}
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// bridgePort sets the bridge state of a tap's port (0 disabled, 3
// forwarding): a disabled port neither forwards the engine's frames nor
// delivers others to it, while raw sockets on the tap still see and inject.
func bridgePort(t *testing.T, iface string, state int) {
	t.Helper()
	if err := atkRun("bridge", "link", "set", "dev", iface, "state", strconv.Itoa(state)); err != nil {
		t.Fatal(err)
	}
}

func TestAttack(t *testing.T) {
	t0 := time.Now()
	tb := newAttackBed(t)
	t.Logf("set-up %v", time.Since(t0).Round(time.Millisecond))
	// A failed subtest may leave an op outstanding or an engine frozen:
	// the ones after it would only report its consequences.
	run := func(name string, fn func(t *testing.T)) {
		if !t.Failed() {
			t.Run(name, fn)
		}
	}

	run("ForgedRequest", func(t *testing.T) {
		tb.atk.Drain()
		tb.tapB.Drain()
		baseB := stats(t, tb.pb)
		forged := []struct {
			name   string
			region abi.RegionID
			key    aesni.Key
		}{
			{"random key", tb.rb.ID(), tb.randKey()},
			{"K_r used as a K_d", tb.rb.ID(), tb.rb.Key()},
			{"the reader's K_d sent from the attacker's address", tb.rb.ID(), tb.kd},
			{"unknown region", abi.MakeRegionID(999, 77), tb.randKey()},
		}
		for _, v := range forged {
			req := tb.forgedRequest(tb.epX, tb.epB, 4242, v.region, 0, 4096, v.key)
			inject(t, tb.atk, req)
			rf := parse(t, req)
			ans, err := tb.atk.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Tag == rf.Tag }))
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			af := parse(t, ans.Data)
			addr, _ := aesni.NonceCounter(af.IV[:])
			if af.Type != wire.TypeError || abi.Status(af.Status) != abi.StatusRemoteAuthFailure || af.SrcIP != rf.DstIP ||
				af.DstIP != rf.SrcIP || af.DstMAC != atkMACX || rawnet.PayloadLen(ans.Data) != 0 || netip.AddrFrom4(addr) != ipB {
				t.Fatalf("%s: answer %+v, want REMOTE_AUTHENTICATION_FAILURE from B to the attacker", v.name, af)
			}
			if err := rawnet.OpenAuthFailure(ans.Data, rf.IV[:]); err != nil {
				t.Fatalf("%s: the answer does not open with the reserved key: %v", v.name, err)
			}
			wrong := rf.IV
			wrong[11] ^= 1
			if rawnet.OpenAuthFailure(ans.Data, wrong[:]) == nil {
				t.Fatalf("%s: the answer is not tied to the request IV", v.name)
			}
		}
		expect(t, "B", tb.pb, baseB, delta{cReqAuthFailed, uint64(len(forged))}, delta{cReqServed, 0}, delta{cRxDropped, 0})
		if leaked, _ := tb.tapB.Capture(200*time.Millisecond, 0, fromEngine(func(f *wire.Fields) bool {
			return f.Type == wire.TypeReadResp
		})); len(leaked) != 0 {
			t.Fatalf("B sent %d data frames during the forged requests", len(leaked))
		}
		tb.legit(t, 32)
	})

	// The captured request of a completed read, for later subtests.
	var done rawnet.Frame
	run("ReplayedRequest", func(t *testing.T) {
		const off = 8192 + 320
		req := tb.readOp(t, off, 0, 1)
		tb.checkOp(t, off, 0, 1)
		done = req
		rf := parse(t, req.Data)
		orig := chunks(t, tb.tapA, true, rf.Tag, 4096)
		plain := tb.rb.Bytes()[off : off+4096]
		for _, c := range orig {
			for w := 0; w+16 <= len(plain); w += 16 {
				if bytes.Contains(c.Data, plain[w:w+16]) {
					t.Fatalf("plaintext bytes %d..%d on the wire", off+w, off+w+16)
				}
			}
		}
		// B has seen the request's IV counter: every copy is dropped
		// after it authenticated, unanswered. (Without replay detection a
		// replay is served again under fresh IVs, new ciphertext only:
		// engine TestReplayedRequestFreshCiphertext.)
		baseA, baseB := stats(t, tb.pa), stats(t, tb.pb)
		const replays = 3
		tb.tapB.Drain()
		for range replays {
			inject(t, tb.tapB, req.Data)
		}
		expect(t, "B", tb.pb, baseB, delta{cReqReplayed, replays}, delta{cReqServed, 0}, delta{cReqAuthFailed, 0})
		if out, _ := tb.tapB.Capture(200*time.Millisecond, 0, fromEngine(func(f *wire.Fields) bool { return f.Tag == rf.Tag })); len(out) != 0 {
			t.Fatalf("B answered the replays with %d frames", len(out))
		}
		expect(t, "A", tb.pa, baseA, delta{cRxStale, 0}, delta{cRxAuthFailed, 0}, delta{cRxDuplicate, 0})
		tb.noCompletion(t, "after the replays")
		tb.legit(t, 32)
	})

	run("TamperedResponse", func(t *testing.T) {
		// Man in the middle: A's bridge port is disabled, so the attacker
		// relays A's request to B and holds B's answer, injects tampered
		// copies first, then the genuine frames.
		const off, sinkOff = 16384 + 64, 4096
		fill(tb.asink.Bytes()[sinkOff:sinkOff+4096], 0xa5)
		bridgePort(t, tb.ifA, 0)
		defer bridgePort(t, tb.ifA, 3)
		tb.tapB.Drain()
		req := tb.readOp(t, off, sinkOff, 2)
		rf := parse(t, req.Data)
		inject(t, tb.tapB, req.Data)
		genuine := chunks(t, tb.tapB, false, rf.Tag, 4096)
		if len(genuine) != 3 {
			t.Fatalf("%d chunks for 4 KB, want 3 at MTU 1500", len(genuine))
		}
		time.Sleep(20 * time.Millisecond)
		tb.noCompletion(t, "with the genuine answer held back")
		baseA := stats(t, tb.pa)
		flip := func(at int) func([]byte) []byte {
			return func(b []byte) []byte {
				c := append([]byte(nil), b...)
				c[at] ^= 0x10
				return c
			}
		}
		rewrite := func(edit func(*wire.Fields)) func([]byte) []byte {
			return func(b []byte) []byte {
				c, err := rawnet.Rewrite(b, edit)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
		}
		tampers := []struct {
			name  string
			chunk int // -1: every chunk
			fn    func([]byte) []byte
		}{
			{"a payload bit", -1, flip(wire.PayloadOffset + 17)},
			{"a tag bit", -1, func(b []byte) []byte { c := append([]byte(nil), b...); c[len(c)-1] ^= 1; return c }},
			{"an IV bit", -1, flip(wire.IVOffset + 11)},
			{"the PID", 0, rewrite(func(f *wire.Fields) { f.PID++ })},
			{"the region field", 0, rewrite(func(f *wire.Fields) { f.Region ^= 1 })},
			{"the offset (another chunk's)", 0, rewrite(func(f *wire.Fields) { f.Offset = 1408 })},
			{"the status", 1, rewrite(func(f *wire.Fields) { f.Status = 1 })},
			{"the flags", 1, rewrite(func(f *wire.Fields) { f.Flags = 0x80 })},
			{"the UDP source port", 2, rewrite(func(f *wire.Fields) { f.SrcPort++ })},
			{"the length (payload cut to 640 B)", 2, func(b []byte) []byte {
				c, err := rawnet.Rewrite(b, func(f *wire.Fields) { f.Length = 640 })
				if err != nil {
					t.Fatal(err)
				}
				// Keep 640 B of ciphertext and the original tag.
				c = append(c[:wire.PayloadOffset+640], wire.Trailer(b, rawnet.PayloadLen(b))...)
				binary.BigEndian.PutUint16(c[wire.EthLen+2:], uint16(len(c)-wire.EthLen))
				binary.BigEndian.PutUint16(c[wire.EthLen+wire.IPv4Len+4:], uint16(len(c)-wire.EthLen-wire.IPv4Len))
				rawnet.FixIPv4Checksum(c)
				return c
			}},
		}
		n := 0
		for _, tp := range tampers {
			for i, g := range genuine {
				if tp.chunk >= 0 && tp.chunk != i {
					continue
				}
				inject(t, tb.tapA, tp.fn(g.Data))
				n++
			}
		}
		expect(t, "A", tb.pa, baseA, delta{cRxAuthFailed, uint64(n)}, delta{cRxDropped, 0}, delta{cRxStale, 0})
		tb.noCompletion(t, "after tampered chunks only")
		// The genuine chunks, two with IPv4 fields outside the AAD changed
		// (TTL, ID, and so a wrong header checksum): accepted.
		for i, g := range genuine {
			c := append([]byte(nil), g.Data...)
			if i < 2 {
				c[wire.EthLen+8] = 3              // TTL
				c[wire.EthLen+4] = 0xbe           // ID
				c[wire.EthLen+5] = byte(0xef + i) // (checksum now wrong)
			}
			inject(t, tb.tapA, c)
		}
		tb.checkOp(t, off, sinkOff, 2)
		expect(t, "A", tb.pa, baseA, delta{cRxAuthFailed, uint64(n)}, delta{cRxDropped, 0}, delta{cRxStale, 0}, delta{cRxDuplicate, 0})
		bridgePort(t, tb.ifA, 3)
		tb.legit(t, 32)
	})

	run("ForgedAnswers", func(t *testing.T) {
		// The server is frozen, so the op stays outstanding while the
		// attacker, who sniffed the request, answers it.
		const off, sinkOff = 24576 + 128, 8192
		fill(tb.asink.Bytes()[sinkOff:sinkOff+4096], 0x5a)
		if err := tb.b.Freeze(); err != nil {
			t.Fatal(err)
		}
		defer tb.b.Thaw()
		req := tb.readOp(t, off, sinkOff, 3)
		rf := parse(t, req.Data)
		src, dst := tb.epB, tb.epA
		dst.Port = rf.SrcPort
		wrongIV := rf.IV
		wrongIV[11]++
		k := tb.randKey()
		type forged struct {
			name  string
			frame []byte
		}
		authFail := []forged{
			{"data chunk 0, random key", tb.forgedAnswer(src, dst, &rf, wire.TypeReadResp, 0, 0, 1408, k, false, rf.IV[:])},
			{"data chunk 1, random key", tb.forgedAnswer(src, dst, &rf, wire.TypeReadResp, 0, 1408, 1408, k, false, rf.IV[:])},
			{"last chunk, random key", tb.forgedAnswer(src, dst, &rf, wire.TypeReadResp, 0, 2816, 1280, k, false, rf.IV[:])},
			{"data without the request IV", tb.forgedAnswer(src, dst, &rf, wire.TypeReadResp, 0, 0, 1408, k, false, nil)},
			{"NACK, random key", tb.forgedAnswer(src, dst, &rf, wire.TypeNack, 0, 0, 0, k, false, rf.IV[:])},
			{"REMOTE_BOUNDS, random key", tb.forgedAnswer(src, dst, &rf, wire.TypeError, abi.StatusRemoteBounds, 0, 0, k, false, rf.IV[:])},
			{"REMOTE_REGION, reserved key", tb.forgedAnswer(src, dst, &rf, wire.TypeError, abi.StatusRemoteRegion, 0, 0, aesni.ReservedKey(), false, rf.IV[:])},
			{"NACK, reserved key", tb.forgedAnswer(src, dst, &rf, wire.TypeNack, 0, 0, 0, aesni.ReservedKey(), false, rf.IV[:])},
			{"REMOTE_AUTHENTICATION_FAILURE for a guessed request IV", tb.forgedAnswer(src, dst, &rf, wire.TypeError, abi.StatusRemoteAuthFailure, 0, 0, k, true, wrongIV[:])},
		}
		dropped := []forged{
			{"error with status OK", tb.forgedAnswer(src, dst, &rf, wire.TypeError, abi.StatusOK, 0, 0, k, false, rf.IV[:])},
			{"error with a local status", tb.forgedAnswer(src, dst, &rf, wire.TypeError, abi.StatusLocalBounds, 0, 0, k, false, rf.IV[:])},
			{"ACK for a READ", tb.forgedAnswer(src, dst, &rf, wire.TypeAck, 0, 0, 0, k, false, rf.IV[:])},
			{"misaligned offset", tb.forgedAnswer(src, dst, &rf, wire.TypeReadResp, 0, 100, 640, k, false, rf.IV[:])},
			{"beyond the op", tb.forgedAnswer(src, dst, &rf, wire.TypeReadResp, 0, 2816, 1408, k, false, rf.IV[:])},
		}
		otherSrc := src
		otherSrc.IP, otherSrc.MAC = atkIPC, atkMACC
		otherSeq := rf
		otherSeq.Tag++
		stale := []forged{
			{"data from another address", tb.forgedAnswer(otherSrc, dst, &rf, wire.TypeReadResp, 0, 0, 1408, k, false, rf.IV[:])},
			{"data for another sequence", tb.forgedAnswer(src, dst, &otherSeq, wire.TypeReadResp, 0, 0, 1408, k, false, rf.IV[:])},
			{"auth failure from another address", tb.forgedAnswer(otherSrc, dst, &rf, wire.TypeError, abi.StatusRemoteAuthFailure, 0, 0, k, true, rf.IV[:])},
		}
		baseA := stats(t, tb.pa)
		for _, set := range [][]forged{authFail, dropped, stale} {
			for _, f := range set {
				inject(t, tb.tapA, f.frame)
			}
		}
		expect(t, "A", tb.pa, baseA, delta{cRxAuthFailed, uint64(len(authFail))}, delta{cRxDropped, uint64(len(dropped))},
			delta{cRxStale, uint64(len(stale))})
		tb.noCompletion(t, "after forged answers")
		for i, b := range tb.asink.Bytes()[sinkOff : sinkOff+4096] {
			if b != 0x5a && b != 0 { // a forged chunk that failed leaves zeros
				t.Fatalf("sink byte %d is %#x after forged answers only", i, b)
			}
		}
		if err := tb.b.Thaw(); err != nil {
			t.Fatal(err)
		}
		tb.checkOp(t, off, sinkOff, 3)

		// The documented exception: REMOTE_AUTHENTICATION_FAILURE is sealed
		// with the public reserved key, so whoever sniffed the request IV
		// can fail the op at once (aesni.ReservedKeyText). It writes
		// nothing, and the genuine answers that follow are stale.
		const off2, sinkOff2 = 32768 + 192, 12288
		fill(tb.asink.Bytes()[sinkOff2:sinkOff2+4096], 0x3c)
		if err := tb.b.Freeze(); err != nil {
			t.Fatal(err)
		}
		req = tb.readOp(t, off2, sinkOff2, 4)
		rf = parse(t, req.Data)
		dst.Port = rf.SrcPort
		baseA = stats(t, tb.pa)
		inject(t, tb.tapA, tb.forgedAnswer(src, dst, &rf, wire.TypeError, abi.StatusRemoteAuthFailure, 0, 0, k, true, rf.IV[:]))
		c := waitOne(t, tb.pa, 5*time.Second)
		if c.Status != abi.StatusRemoteAuthFailure || c.Cookie != 4 {
			t.Fatalf("forged REMOTE_AUTHENTICATION_FAILURE with the sniffed IV: %+v", c)
		}
		if !bytes.Equal(tb.asink.Bytes()[sinkOff2:sinkOff2+4096], bytes.Repeat([]byte{0x3c}, 4096)) {
			t.Fatal("the failed op wrote its sink")
		}
		if err := tb.b.Thaw(); err != nil {
			t.Fatal(err)
		}
		expect(t, "A", tb.pa, baseA, delta{cAuthFailCpl, 1}, delta{cRxAuthFailed, 0}, delta{cRxStale, 3})
		tb.noCompletion(t, "after the genuine answers to a failed op")
		tb.legit(t, 32)
	})

	run("Misdirected", func(t *testing.T) {
		// A request sniffed while outstanding, re-addressed to C (MAC and
		// IPv4, both under the tag): C cannot authenticate it and answers
		// the initiator, which drops the answer (wrong source); the op
		// completes OK once B thaws.
		const off, sinkOff = 40960 + 256, 0
		if err := tb.b.Freeze(); err != nil {
			t.Fatal(err)
		}
		defer tb.b.Thaw()
		req := tb.readOp(t, off, sinkOff, 5)
		rf := parse(t, req.Data)
		toC, err := rawnet.Rewrite(req.Data, func(f *wire.Fields) {
			f.DstMAC, f.DstIP = atkMACC, binary.BigEndian.Uint32(atkIPC.AsSlice())
		})
		if err != nil {
			t.Fatal(err)
		}
		tb.tapC.Drain()
		baseA, baseC := stats(t, tb.pa), stats(t, tb.pc)
		inject(t, tb.tapC, toC)
		ans, err := tb.tapC.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Tag == rf.Tag }))
		if err != nil {
			t.Fatal("C's answer:", err)
		}
		af := parse(t, ans.Data)
		if af.Type != wire.TypeError || abi.Status(af.Status) != abi.StatusRemoteAuthFailure || af.DstMAC != atkMACA ||
			rawnet.Addr(af.SrcIP) != atkIPC || rawnet.Addr(af.DstIP) != ipA || rawnet.OpenAuthFailure(ans.Data, rf.IV[:]) != nil {
			t.Fatalf("C's answer %+v, want REMOTE_AUTHENTICATION_FAILURE to A", af)
		}
		expect(t, "C", tb.pc, baseC, delta{cReqAuthFailed, 1}, delta{cReqServed, 0})
		expect(t, "A", tb.pa, baseA, delta{cRxStale, 1}, delta{cRxAuthFailed, 0})
		tb.noCompletion(t, "after C's answer")
		if err := tb.b.Thaw(); err != nil {
			t.Fatal(err)
		}
		tb.checkOp(t, off, sinkOff, 5)

		// Frames that are not for the engine that gets them.
		mis := func(edit func(*wire.Fields)) []byte {
			b, err := rawnet.Rewrite(req.Data, edit)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		atB := [][]byte{
			mis(func(f *wire.Fields) { f.DstIP = binary.BigEndian.Uint32(atkIPC.AsSlice()) }), // B's MAC, C's address
			mis(func(f *wire.Fields) { f.DstMAC = wire.Broadcast }),
			mis(func(f *wire.Fields) { f.DstPort = atkPort + 1 }),
			mis(func(f *wire.Fields) { f.DstPort = 53 }),
		}
		atC := [][]byte{
			mis(func(f *wire.Fields) { f.DstMAC = atkMACC }), // C's MAC, B's address
		}
		// A response to A re-addressed to C: C has no such op.
		tb.tapA.Drain()
		tb.legit(t, 1)
		var resp rawnet.Frame
		for _, fr := range mustCapture(t, tb.tapA, toEngine(func(f *wire.Fields) bool { return f.Type == wire.TypeReadResp })) {
			resp = fr
		}
		if resp.Data == nil {
			t.Fatal("no response captured")
		}
		respToC, _ := rawnet.Rewrite(resp.Data, func(f *wire.Fields) {
			f.DstMAC, f.DstIP = atkMACC, binary.BigEndian.Uint32(atkIPC.AsSlice())
		})
		tb.tapB.Drain()
		tb.tapC.Drain()
		baseB, baseC := stats(t, tb.pb), stats(t, tb.pc)
		inject(t, tb.tapB, atB...)
		inject(t, tb.tapC, atC...)
		inject(t, tb.tapC, respToC)
		expect(t, "B", tb.pb, baseB, delta{cRxDropped, uint64(len(atB))}, delta{cReqAuthFailed, 0}, delta{cReqServed, 0})
		expect(t, "C", tb.pc, baseC, delta{cRxDropped, uint64(len(atC))}, delta{cRxStale, 1}, delta{cReqAuthFailed, 0})
		for _, p := range []*rawnet.Port{tb.tapB, tb.tapC} {
			if out, _ := p.Capture(150*time.Millisecond, 0, fromEngine(nil)); len(out) != 0 {
				t.Fatalf("%d answers to frames not for the engine on %s", len(out), p.Name)
			}
		}
		tb.legit(t, 32)
	})

	run("RewrittenRequest", func(t *testing.T) {
		if done.Data == nil {
			t.Skip("needs the request captured by ReplayedRequest")
		}
		rf := parse(t, done.Data)
		edits := []struct {
			name string
			edit func(*wire.Fields)
		}{
			{"another region of the owner", func(f *wire.Fields) { f.Region = uint32(tb.rb2.ID()) }},
			{"an unknown region id", func(f *wire.Fields) { f.Region = uint32(abi.MakeRegionID(1000, 3)) }},
			{"the server's PID", func(f *wire.Fields) { f.PID = uint32(tb.b.Pid()) }},
			{"another PID", func(f *wire.Fields) { f.PID++ }},
			{"PID 0", func(f *wire.Fields) { f.PID = 0 }},
			{"the offset", func(f *wire.Fields) { f.Offset = 0 }},
			{"the length", func(f *wire.Fields) { f.Length = 64 }},
			{"the IV", func(f *wire.Fields) { f.IV[11] ^= 1 }},
		}
		tb.tapB.Drain()
		baseA, baseB := stats(t, tb.pa), stats(t, tb.pb)
		for _, e := range edits {
			b, err := rawnet.Rewrite(done.Data, e.edit)
			if err != nil {
				t.Fatal(err)
			}
			inject(t, tb.tapB, b)
			bf := parse(t, b)
			ans, err := tb.tapB.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Tag == rf.Tag }))
			if err != nil {
				t.Fatalf("%s: %v", e.name, err)
			}
			af := parse(t, ans.Data)
			if af.Type != wire.TypeError || abi.Status(af.Status) != abi.StatusRemoteAuthFailure || af.PID != bf.PID ||
				rawnet.OpenAuthFailure(ans.Data, bf.IV[:]) != nil {
				t.Fatalf("%s: answer %+v, want REMOTE_AUTHENTICATION_FAILURE", e.name, af)
			}
		}
		// The untouched request still authenticates (it is then dropped
		// as a replay), proving the rewrites alone made the difference.
		inject(t, tb.tapB, done.Data)
		expect(t, "B", tb.pb, baseB, delta{cReqAuthFailed, uint64(len(edits))}, delta{cReqReplayed, 1}, delta{cReqServed, 0}, delta{cRxDropped, 0})
		expect(t, "A", tb.pa, baseA, delta{cRxStale, uint64(len(edits))}, delta{cRxAuthFailed, 0})
		tb.legit(t, 32)
	})

	writeAttacks(t, tb, run)

	run("Malformed", func(t *testing.T) {
		good := tb.forgedRequest(tb.epX, tb.epB, 4343, tb.rb.ID(), 0, 4096, tb.randKey())
		edit := func(fn func(b []byte) []byte) []byte { return fn(append([]byte(nil), good...)) }
		setU16 := func(at int, v uint16) func([]byte) []byte {
			return func(b []byte) []byte { binary.BigEndian.PutUint16(b[at:], v); rawnet.FixIPv4Checksum(b); return b }
		}
		setByte := func(at int, v byte) func([]byte) []byte {
			return func(b []byte) []byte { b[at] = v; rawnet.FixIPv4Checksum(b); return b }
		}
		withPayload := func(typ wire.Type, plen int, length uint32) []byte {
			f, _, _ := rawnet.Parse(good)
			f.Type, f.Length = typ, length
			b := rawnet.Build(&f, plen)
			rawnet.SealAnswer(b, tb.randKey(), make([]byte, plen), nil)
			return b
		}
		const ip, udp, hdr = wire.EthLen, wire.EthLen + wire.IPv4Len, wire.EthLen + wire.IPv4Len + wire.UDPLen
		malformed := []struct {
			name  string
			frame []byte
		}{
			{"Ethernet header only", good[:14]},
			{"cut in the IPv4 header", good[:30]},
			{"cut after UDP", good[:42]},
			{"cut in the OneRMA header", good[:70]},
			{"no trailer", good[:wire.PayloadOffset]},
			{"one byte short", good[:len(good)-1]},
			{"no trailer, lengths consistent", edit(func(b []byte) []byte {
				b = b[:wire.PayloadOffset]
				binary.BigEndian.PutUint16(b[ip+2:], uint16(len(b)-ip))
				binary.BigEndian.PutUint16(b[udp+4:], uint16(len(b)-udp))
				rawnet.FixIPv4Checksum(b)
				return b
			})},
			{"IPv4 total length beyond the frame", edit(setU16(ip+2, 1400))},
			{"IPv4 total length below the minimum", edit(setU16(ip+2, 60))},
			{"UDP length +1", edit(setU16(udp+4, uint16(len(good)-udp+1)))},
			{"UDP length -1", edit(setU16(udp+4, uint16(len(good)-udp-1)))},
			{"UDP length 0", edit(setU16(udp+4, 0))},
			{"version 0", edit(setByte(hdr, 0))},
			{"version 2", edit(setByte(hdr, 2))},
			{"type 0", edit(setByte(hdr+1, 0))},
			{"type 12 (after the LOOKUP types)", edit(setByte(hdr+1, 12))},
			{"type 255", edit(setByte(hdr+1, 255))},
			{"reserved word", edit(setByte(hdr+47, 1))},
			{"request with a payload", withPayload(wire.TypeReadReq, 64, 4096)},
			{"response whose length field lies", withPayload(wire.TypeReadResp, 64, 100)},
			{"REKEY carrying 64 B instead of a key", withPayload(wire.TypeRekeyReq, 64, 64)},
			{"IPv6 in the IPv4 version nibble", edit(setByte(ip, 0x65))},
			{"TCP", edit(setByte(ip+9, 6))},
			{"IPv6 EtherType", edit(setU16(12, 0x86dd))},
			{"802.1Q tagged", edit(func(b []byte) []byte {
				return append(append(append([]byte(nil), b[:12]...), 0x81, 0x00, 0x00, 0x05), b[12:]...)
			})},
			{"unknown EtherType", edit(setU16(12, 0x88b5))},
			{"short ARP", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[12:], 0x0806); return b[:30] })},
		}
		// IPv4 the engine does not take, each counted on its own.
		hygiene := []struct {
			name  string
			frame []byte
			c     counter
		}{
			{"IPv4 options (IHL 6)", edit(func(b []byte) []byte {
				o := append(append(append([]byte(nil), b[:ip+20]...), 1, 1, 1, 0), b[ip+20:]...)
				o[ip] = 0x46
				binary.BigEndian.PutUint16(o[ip+2:], uint16(len(o)-ip))
				rawnet.FixIPv4Checksum(o)
				return o
			}), cRxIPOptions},
			{"fragment: more fragments", edit(setU16(ip+6, 0x2000)), cRxFragments},
			{"fragment: offset 8", edit(setU16(ip+6, 0x0001)), cRxFragments},
			{"TTL 0", edit(setByte(ip+8, 0)), cRxTTLZero},
		}
		tb.tapB.Drain()
		baseB := stats(t, tb.pb)
		for _, m := range malformed {
			inject(t, tb.tapB, m.frame)
		}
		perCounter := map[string]uint64{}
		for _, h := range hygiene {
			inject(t, tb.tapB, h.frame)
			perCounter[h.c.name]++
		}
		// A wrong IPv4 header checksum alone is not checked (the tag covers
		// the addresses): the forged request is answered as usual.
		badSum := edit(func(b []byte) []byte { b[ip+10] ^= 0xff; return b })
		inject(t, tb.tapB, badSum)
		expect(t, "B", tb.pb, baseB, delta{cRxDropped, uint64(len(malformed))}, delta{cReqAuthFailed, 1},
			delta{cRxFrames, uint64(len(malformed) + len(hygiene) + 1)}, delta{cReqServed, 0}, delta{cReqErrors, 0},
			delta{cRxIPOptions, perCounter[cRxIPOptions.name]}, delta{cRxFragments, perCounter[cRxFragments.name]},
			delta{cRxTTLZero, perCounter[cRxTTLZero.name]})
		answers, err := tb.tapB.Capture(200*time.Millisecond, 0, fromEngine(nil))
		if err != nil {
			t.Fatal(err)
		}
		if len(answers) != 1 || tagOf(answers[0].Data) != tagOf(badSum) {
			t.Fatalf("%d answers, want 1 (to the request with a bad IPv4 checksum)", len(answers))
		}

		// Larger than the port's MTU: the kernel refuses it at 1500; on a
		// tap raised to 9000 it reaches the tap PMD, which drops it.
		big := withPayload(wire.TypeReadResp, 3000, 3000)
		if err := tb.tapB.Inject(big); err == nil {
			t.Fatal("a 3106-byte frame was sent on a 1500-byte link")
		}
		if err := atkRun("ip", "link", "set", tb.ifB, "mtu", "9000"); err != nil {
			t.Fatal(err)
		}
		jumbo, err := rawnet.Open(tb.ifB)
		if err == nil {
			baseB = stats(t, tb.pb)
			err = jumbo.Inject(big)
			jumbo.Close()
		}
		if rerr := atkRun("ip", "link", "set", tb.ifB, "mtu", "1500"); rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		expect(t, "B", tb.pb, baseB, delta{cRxFrames, 0}, delta{cRxDropped, 0}, delta{cReqAuthFailed, 0})
		if out, _ := tb.tapB.Capture(100*time.Millisecond, 0, fromEngine(nil)); len(out) != 0 {
			t.Fatalf("%d answers to a jumbo frame", len(out))
		}
		tb.legit(t, 32)
	})

	run("Flood", func(t *testing.T) {
		const total = 100_000
		const minLegit = 1000
		stop := make(chan struct{})
		type result struct {
			n   int
			err error
		}
		res := make(chan result, 1)
		baseA, baseB := stats(t, tb.pa), stats(t, tb.pb)
		txDropped := func() uint64 {
			b, _ := os.ReadFile("/sys/class/net/" + tb.ifB + "/statistics/tx_dropped")
			v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			return v
		}
		drop0 := txDropped()
		go func() {
			n, err := tb.legitReads(minLegit, stop)
			res <- result{n, err}
		}()
		accounted := func(s *ctlmsg.Stats) uint64 {
			sum := uint64(0)
			for _, c := range append([]counter{cRxDropped, cReqAuthFailed, cReqIVMismatch, cRxStale, cRxAuthFailed, cRxDuplicate}, cNotOneRMA...) {
				sum += c.get(s) - c.get(baseB)
			}
			return sum
		}
		proto := tb.forgedRequest(tb.epX, tb.epB, 4444, tb.rb.ID(), 0, 4096, tb.randKey())
		kinds := make(map[string]int)
		buf := make([]byte, 1514)
		t0 := time.Now()
		p0 := tb.progress.Load()
		sent := 0
		// At least total frames, and on until the reader has done
		// minLegit reads under fire.
		var r result
		legitEnded := false
		for ; sent < total || tb.progress.Load()-p0 < minLegit; sent++ {
			if sent%1024 == 0 {
				select {
				case r = <-res: // ended early: an error
					legitEnded = true
				default:
				}
				if legitEnded {
					break
				}
			}
			var fr []byte
			switch sent % 5 {
			case 0: // forged request for the real region, random PID and key
				kinds["forged"]++
				fr = tb.forgedRequest(tb.epX, tb.epB, tb.rng.Uint32(), tb.rb.ID(), uint64(tb.rng.IntN(60000)), uint32(1+tb.rng.IntN(4096)), tb.randKey())
			case 1: // forged request for a random region id
				kinds["forged"]++
				fr = tb.forgedRequest(tb.epX, tb.epB, 4444, abi.RegionID(tb.rng.Uint32()), 0, 64, tb.randKey())
			case 2: // a forged request with 1-4 random bytes changed (EtherType kept)
				kinds["mutated"]++
				fr = append(buf[:0], proto...)
				for range 1 + tb.rng.IntN(4) {
					fr[14+tb.rng.IntN(len(fr)-14)] ^= byte(1 + tb.rng.IntN(255))
				}
			case 3: // garbage addressed to B
				kinds["garbage"]++
				fr = buf[:14+tb.rng.IntN(1500)]
				for i := range fr {
					fr[i] = byte(tb.rng.Uint32())
				}
				copy(fr[0:6], atkMACB[:])
				copy(fr[6:12], atkMACX[:])
				if sent%10 == 3 {
					binary.BigEndian.PutUint16(fr[12:], wire.EtherTypeIPv4)
				} else if binary.BigEndian.Uint16(fr[12:]) == wire.EtherTypeARP {
					fr[12] ^= 0x80
				}
			case 4: // answers with random headers: types, tags, offsets, lengths
				kinds["answers"]++
				f := rawnet.Fields(tb.epX, tb.epB)
				f.Type = wire.Type(2 + tb.rng.IntN(5))
				f.Tag, f.Offset, f.PID = tb.rng.Uint64(), uint64(tb.rng.IntN(4096)), tb.rng.Uint32()
				plen := 0
				if f.Type == wire.TypeReadResp {
					plen = tb.rng.IntN(1409)
				}
				f.Length = uint32(plen)
				f.IV = rawnet.Nonce(atkIPX, tb.rng.Uint64())
				fr = rawnet.Build(&f, plen)
				rawnet.SealAnswer(fr, tb.randKey(), make([]byte, plen), nil)
			}
			if err := tb.tapB.Inject(fr); err != nil {
				t.Fatal(err)
			}
			// Flow control: keep at most ~400 frames queued at B, so the
			// tap's queue never overflows into the legitimate requests.
			if sent%128 == 127 {
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Microsecond) {
					s := stats(t, tb.pb)
					if uint64(sent+1)-accounted(s) < 384 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("B processed only %d of %d flood frames", accounted(s), sent+1)
					}
				}
			}
		}
		flood := time.Since(t0)
		var s *ctlmsg.Stats
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			s = stats(t, tb.pb)
			if accounted(s)+(txDropped()-drop0) >= uint64(sent) || time.Now().After(deadline) {
				break
			}
		}
		close(stop)
		if !legitEnded {
			r = <-res
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.n < minLegit {
			t.Fatalf("%d legitimate reads during the flood, want >= %d", r.n, minLegit)
		}
		time.Sleep(100 * time.Millisecond)
		s = stats(t, tb.pb)
		lost := txDropped() - drop0
		if got := accounted(s); got+lost != uint64(sent) {
			t.Fatalf("B accounted for %d flood frames (+%d dropped by the tap queue), sent %d", got, lost, sent)
		}
		if s.ReqServed-baseB.ReqServed != uint64(r.n) {
			t.Fatalf("B served %d requests, the reader made %d", s.ReqServed-baseB.ReqServed, r.n)
		}
		sa := stats(t, tb.pa)
		if sa.RxAuthFailed != baseA.RxAuthFailed || sa.Completed[abi.StatusOK.String()]-baseA.Completed[abi.StatusOK.String()] != uint64(r.n) {
			t.Fatalf("reader: rx_auth_failed +%d, OK +%d, want 0 and %d", sa.RxAuthFailed-baseA.RxAuthFailed,
				sa.Completed[abi.StatusOK.String()]-baseA.Completed[abi.StatusOK.String()], r.n)
		}
		notOneRMA := uint64(0)
		for _, c := range cNotOneRMA {
			notOneRMA += c.get(s) - c.get(baseB)
		}
		t.Logf("flood: %d frames %v in %v (%.0f frames/s), tap queue drops %d; B: rx_dropped +%d, req_auth_failed +%d, rx_stale +%d, rx_auth_failed +%d, IPv4 and ICMP counters +%d; %d legitimate reads OK",
			sent, kinds, flood.Round(time.Millisecond), float64(sent)/flood.Seconds(), lost,
			s.RxDropped-baseB.RxDropped, s.ReqAuthFailed-baseB.ReqAuthFailed, s.RxStale-baseB.RxStale, s.RxAuthFailed-baseB.RxAuthFailed, notOneRMA, r.n)
		tb.atk.Drain()
		tb.tapA.Drain()
		tb.tapB.Drain()
		tb.tapC.Drain()
	})

	if t.Failed() {
		return
	}
	// After everything: the engines serve correctly.
	verifiedReads(t, tb.pa, ipB, tb.rb)
	verifiedReads(t, tb.pa, atkIPC, tb.rc)
	t.Logf("total %v, %d legitimate reads verified besides", time.Since(t0).Round(time.Millisecond), tb.legitDone)
}

// mustCapture returns the frames queued on p that match keep (a short wait
// for stragglers).
func mustCapture(t *testing.T, p *rawnet.Port, keep func(*rawnet.Frame) bool) []rawnet.Frame {
	t.Helper()
	out, err := p.Capture(100*time.Millisecond, 0, keep)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
