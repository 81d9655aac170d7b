package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// The routed testbed's engines: every one has a reachable time of 2 s (so
// a changed gateway MAC is re-resolved within a test), ARP resolution gives
// up after 250 ms, and TIMEOUT is 1 s (relaxed: the engines idle in backoff
// mode on CI's two cores).
const (
	routedReachable = 2 * time.Second
	routedResolve   = 250 * time.Millisecond
	routedTimeout   = time.Second
)

var routedFlags = []string{"-dispatch-timeout", "500ms", "-timeout", routedTimeout.String(),
	"-resolve-timeout", routedResolve.String(), "-arp-retry", "25ms"}

// routedNowhere is routed by every engine via the .254 of its own subnet,
// an address no one holds: its ARP requests for it are never answered.
var routedNowhere = netip.MustParsePrefix("10.9.0.0/16")

// route is one entry of engine.routes.
type route struct {
	Dst string `json:"dst"`
	Via string `json:"via"`
	MTU int    `json:"mtu,omitempty"`
}

// routedApp is the application on one engine of the testbed (this
// process): a region it reads from (ro, the pattern), one it is written to
// (rw), and slots and a local region for its own ops.
type routedApp struct {
	p      *portal.Portal
	ro, rw *portal.Region
	slots  []abi.SlotID
	local  *portal.Region // sink of its READs, source of its WRITEs: a 4 KB range per slot
	cookie uint64         // the next op's cookie: unique over the app's life
}

const routedRegion = 64 << 10

func newRoutedApp(e *testbed.Engine) (*routedApp, error) {
	p, err := portal.Dial(e.Socket, "routed")
	if err != nil {
		return nil, err
	}
	a := &routedApp{p: p}
	fail := func(err error) (*routedApp, error) { p.Close(); return nil, err }
	if a.ro, err = p.RegisterRegion(routedRegion, abi.PermRemoteRead); err != nil {
		return fail(err)
	}
	if a.rw, err = p.RegisterRegion(routedRegion, abi.PermRemoteRead|abi.PermRemoteWrite); err != nil {
		return fail(err)
	}
	for i, b := 0, a.ro.Bytes(); i < len(b); i++ {
		b[i] = pattern(uint64(i))
	}
	if a.slots, err = p.AllocSlots(8); err != nil {
		return fail(err)
	}
	if a.local, err = p.RegisterRegion(uint64(len(a.slots))*abi.MaxOpBytes, abi.PermLocalRead|abi.PermLocalWrite); err != nil {
		return fail(err)
	}
	return a, nil
}

// routedBed is the routed topology with its engines running and an
// application on each.
type routedBed struct {
	*testbed.Routed
	dir string
	eng []*testbed.Engine
	app []*routedApp
}

// newRoutedBed builds the topology (testbed.Routed), starts its four
// engines and waits until every engine of one subnet reads from every
// engine of the other.
func newRoutedBed(t *testing.T) *routedBed {
	needEngines(t)
	r, err := testbed.NewRouted(fmt.Sprintf("orr%d", os.Getpid()%1000))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("cannot build the routed network:", err)
	}
	b := &routedBed{Routed: r, dir: t.TempDir(), eng: make([]*testbed.Engine, len(r.Hosts)), app: make([]*routedApp, len(r.Hosts))}
	t.Cleanup(func() { b.close(t) })
	for i := range r.Hosts {
		if err := b.start(i, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range b.crossPairs() {
		if _, err := b.recovered(p[0], p[1], 10*time.Second); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
	}
	return b
}

// crossPairs lists every (initiator, target) pair of engines on different
// subnets.
func (b *routedBed) crossPairs() [][2]int {
	var out [][2]int
	for i, hi := range b.Hosts {
		for j, hj := range b.Hosts {
			if hi.Subnet != hj.Subnet {
				out = append(out, [2]int{i, j})
			}
		}
	}
	return out
}

// start starts engine i (stopping it first if it runs) with the routes
// given after the route to nowhere, attaches it to its subnet and opens
// its application.
func (b *routedBed) start(i int, routes []route) error {
	if err := b.stop(i); err != nil {
		return err
	}
	h, s := &b.Hosts[i], &b.Subnets[b.Hosts[i].Subnet]
	via := s.Prefix.Addr().As4()
	via[3] = 254
	all := append([]route{{Dst: routedNowhere.String(), Via: netip.AddrFrom4(via).String()}}, routes...)
	cfg, err := json.Marshal(map[string]any{"engine": map[string]any{
		"neighbor_reachable": routedReachable.String(),
		"routes":             all,
	}})
	if err != nil {
		return err
	}
	path := filepath.Join(b.dir, h.Name+".json")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		return err
	}
	o := b.Options(i, rmadBin, b.dir)
	o.Extra = append(append(o.Extra, routedFlags...), "-config", path)
	e, err := testbed.Start(o)
	if err != nil {
		return err
	}
	b.eng[i] = e
	if err := b.Attach(i); err != nil {
		return err
	}
	b.app[i], err = newRoutedApp(e)
	return err
}

// stop closes engine i's application and stops the engine.
func (b *routedBed) stop(i int) error {
	if a := b.app[i]; a != nil {
		a.p.Close()
		b.app[i] = nil
	}
	e := b.eng[i]
	if e == nil {
		return nil
	}
	b.eng[i] = nil
	return e.Stop(10 * time.Second)
}

func (b *routedBed) close(t *testing.T) {
	for i, e := range b.eng {
		if e == nil {
			continue
		}
		if err := b.stop(i); err != nil {
			t.Errorf("stopping %s: %v", e.Opt.Name, err)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", e.Opt.Name, e.Tail(40))
		}
	}
	b.Close()
}

// addr is engine i's address.
func (b *routedBed) addr(i int) netip.Addr { return b.Hosts[i].Addr }

// burst posts one op of size bytes per slot of engine src's application
// (READs of dst's ro region, or WRITEs to its rw region, the k-th op at
// offset k*4 KB) and collects their completions: exactly one per op,
// within within, and none after. Every READ completed OK holds the
// region's bytes; after every WRITE completed OK the owner sees the bytes
// written. It returns the completions in the order the ops were posted.
func (b *routedBed) burst(src, dst int, op abi.Op, size uint32, within time.Duration) ([]abi.Completion, error) {
	a, d := b.app[src], b.app[dst]
	peer, n := b.addr(dst), len(a.slots)
	base := a.cookie
	a.cookie += uint64(n)
	for k, s := range a.slots {
		off := uint64(k) * abi.MaxOpBytes
		var err error
		if op == abi.OpRead {
			err = a.p.Post(&portal.Op{
				Type: portal.OpRead, Slot: s, Cookie: base + uint64(k),
				Remote: peer, RemoteRegion: d.ro.ID(), RemoteOffset: off, Key: kdFor(d.ro, a.p),
				Local: a.local, LocalOffset: off, Length: size,
			})
		} else {
			src := a.local.Bytes()[off : off+uint64(size)]
			for i := range src {
				src[i] = byte(base+uint64(k)) ^ byte(i) ^ 0x5a
			}
			err = a.p.Post(&portal.Op{
				Type: portal.OpWrite, Slot: s, Cookie: base + uint64(k),
				Remote: peer, RemoteRegion: d.rw.ID(), RemoteOffset: off, Key: writeKey(d.rw, a.p),
				Local: a.local, LocalOffset: off, Length: size,
			})
		}
		if err != nil {
			return nil, err
		}
	}
	a.p.Flush()
	got, err := collect(a.p, base, n, within)
	if err != nil {
		return nil, fmt.Errorf("%s of %d B from %s to %s: %v", op, size, b.Hosts[src].Name, peer, err)
	}
	for k, c := range got {
		if c.Status != abi.StatusOK {
			continue
		}
		off := uint64(k) * abi.MaxOpBytes
		mine := a.local.Bytes()[off : off+uint64(size)]
		if op == abi.OpRead {
			for i, v := range mine {
				if v != pattern(off+uint64(i)) {
					return nil, fmt.Errorf("READ %d of %d B from %s: byte %d is %#x, want %#x", k, size, peer, i, v, pattern(off+uint64(i)))
				}
			}
		} else if theirs := d.rw.Bytes()[off : off+uint64(size)]; !bytes.Equal(mine, theirs) {
			i := firstDiff(theirs, mine)
			return nil, fmt.Errorf("WRITE %d of %d B to %s completed OK, but the owner sees byte %d as %#x, want %#x",
				k, size, peer, i, theirs[i], mine[i])
		}
	}
	return got, nil
}

// collect waits for the completions of the n ops with cookies base..base+n-1
// (exactly one each, within within), then checks that no other completion
// follows for a while. It returns them in cookie order.
func collect(p *portal.Portal, base uint64, n int, within time.Duration) ([]abi.Completion, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	got := make([]abi.Completion, n)
	seen := make([]bool, n)
	buf := make([]abi.Completion, 16)
	for have := 0; have < n; {
		k, err := p.Wait(ctx, buf)
		if err != nil {
			return nil, fmt.Errorf("%d of %d completions within %v: %v", have, n, within, err)
		}
		for _, c := range buf[:k] {
			i := c.Cookie - base
			if c.Cookie < base || i >= uint64(n) || seen[i] {
				return nil, fmt.Errorf("unexpected completion %+v (cookies %d..%d, each once)", c, base, base+uint64(n)-1)
			}
			seen[i], got[i] = true, c
			have++
		}
	}
	time.Sleep(100 * time.Millisecond)
	if k, err := p.Poll(buf); err != nil {
		return nil, err
	} else if k > 0 {
		return nil, fmt.Errorf("%d completions more than ops posted, the first %+v", k, buf[0])
	}
	return got, nil
}

// statuses counts completions by status.
func statuses(cs []abi.Completion) map[abi.Status]int {
	m := map[abi.Status]int{}
	for _, c := range cs {
		m[c.Status]++
	}
	return m
}

// recovered reads 4 KB from engine dst's ro region into src's, one op at
// a time, until one completes OK with the right bytes, and returns how
// long that took (to the op's completion); after within it gives up.
func (b *routedBed) recovered(src, dst int, within time.Duration) (time.Duration, error) {
	a, d := b.app[src], b.app[dst]
	t0 := time.Now()
	var last abi.Completion
	for time.Since(t0) < within {
		cookie := a.cookie
		a.cookie++
		posted := time.Since(t0)
		if err := a.p.Submit(&portal.Op{
			Type: portal.OpRead, Slot: a.slots[0], Cookie: cookie,
			Remote: b.addr(dst), RemoteRegion: d.ro.ID(), RemoteOffset: 4096, Key: kdFor(d.ro, a.p),
			Local: a.local, Length: 4096,
		}); err != nil {
			return 0, err
		}
		got, err := collect(a.p, cookie, 1, routedTimeout+5*time.Second)
		if err != nil {
			return 0, err
		}
		if last = got[0]; last.Status == abi.StatusOK {
			for i, v := range a.local.Bytes()[:4096] {
				if v != pattern(4096+uint64(i)) {
					return 0, fmt.Errorf("READ from %s: byte %d is %#x, want %#x", b.addr(dst), i, v, pattern(4096+uint64(i)))
				}
			}
			return posted + time.Duration(last.TotalDelayNs), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("no READ from %s to %s completed OK within %v; the last %+v", b.Hosts[src].Name, b.addr(dst), within, last)
}

// allOK fails t unless every op of a burst (src to dst) completes OK.
func (b *routedBed) allOK(t *testing.T, src, dst int, op abi.Op, size uint32) {
	t.Helper()
	cs, err := b.burst(src, dst, op, size, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st := statuses(cs); st[abi.StatusOK] != len(cs) {
		t.Fatalf("%s of %d B from %s to %s: %v, want all OK", op, size, b.Hosts[src].Name, b.addr(dst), st)
	}
}

// A routed multi-host testbed (internal/testbed.Routed): engines on
// af_packet, AF_XDP and net_tap ports on two subnets joined by a Linux
// router, each engine with its subnet's prefix and gateway. The subtests
// share the engines and run in order; the last restarts one.
func TestRouted(t *testing.T) {
	b := newRoutedBed(t)
	t.Run("ReadsWrites", b.testReadsWrites)
	t.Run("Ping", b.testPing)
	t.Run("RouteToNowhere", b.testRouteToNowhere)
	t.Run("LinkDownUp", b.testLinkDownUp)
	t.Run("GatewayMAC", b.testGatewayMAC)
	t.Run("PathMTU", b.testPathMTU)
}

// Verified READs and WRITEs of 1 B to 4 KB both ways between every engine
// of one subnet and every engine of the other, across the router: each
// pair joins two kinds of port.
func (b *routedBed) testReadsWrites(t *testing.T) {
	for _, p := range b.crossPairs() {
		src, dst := p[0], p[1]
		t.Logf("%s (%s, %s) -> %s (%s, %s)", b.Hosts[src].Name, b.Hosts[src].Kind, b.addr(src),
			b.Hosts[dst].Name, b.Hosts[dst].Kind, b.addr(dst))
		// Regions of their own: verifiedWrites models its region's bytes,
		// and verifiedReads expects the pattern.
		owner := b.app[dst].p
		ro := ownerRegion(t, owner, routedRegion, abi.PermRemoteRead)
		rw := ownerRegion(t, owner, routedRegion, abi.PermRemoteRead|abi.PermRemoteWrite)
		verifiedReads(t, b.app[src].p, b.addr(dst), ro)
		verifiedWrites(t, b.app[src].p, b.addr(dst), owner, rw)
		owner.DeregisterRegion(ro)
		owner.DeregisterRegion(rw)
	}
}

// `ping -c 3` from the router's namespace: every engine answers every
// echo request itself (no kernel holds its address), and counts them.
func (b *routedBed) testPing(t *testing.T) {
	if _, err := exec.LookPath("ping"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no ping (iputils-ping; make setup installs it):", err)
		}
		t.Skip("no ping:", err)
	}
	var wg sync.WaitGroup
	outs, errs := make([]string, len(b.Hosts)), make([]error, len(b.Hosts))
	for i, h := range b.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = b.Ping(h.Addr, 3)
		}()
	}
	wg.Wait()
	for i, h := range b.Hosts {
		if errs[i] != nil {
			t.Errorf("%s (%s): %v\n%s", h.Name, h.Kind, errs[i], outs[i])
			continue
		}
		if n := stats(t, b.app[i].p).ICMPEchoReplies; n < 3 {
			t.Errorf("%s (%s): icmp_echo_replies %d after 3 echo requests answered", h.Name, h.Kind, n)
		}
	}
}
