package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// A read whose K_d was derived for another process (or from another key)
// is refused by the serving engine with REMOTE_AUTHENTICATION_FAILURE and
// writes nothing; the server counts it. The right K_d reads.
func TestWrongKeyRefused(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	pa, pb := dial(t, a, "reader"), dial(t, b, "owner")
	rb := ownerRegion(t, pb, 64<<10, abi.PermRemoteRead)
	other := ownerRegion(t, pb, 4096, abi.PermRemoteRead)
	slots, _ := pa.AllocSlots(1)
	sink, _ := pa.RegisterRegion(4096, abi.PermLocalWrite)
	base, err := pb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	id := pa.Identity()
	wrong := []struct {
		name string
		key  aesni.Key
	}{
		{"another pid", rb.DeriveKey(id.Addr, id.PID+1, abi.OpRead)},
		{"another address", rb.DeriveKey(ipB, id.PID, abi.OpRead)},
		{"another region's key", kdFor(other, pa)},
		{"the region key itself", rb.Key()},
	}
	for k, w := range wrong {
		if err := pa.Submit(&portal.Op{
			Type: portal.OpRead, Slot: slots[0], Cookie: uint64(k),
			Remote: ipB, RemoteRegion: rb.ID(), Key: w.key,
			Local: sink, Length: 4096,
		}); err != nil {
			t.Fatal(err)
		}
		if c := waitOne(t, pa, 5*time.Second); c.Status != abi.StatusRemoteAuthFailure || c.Cookie != uint64(k) {
			t.Fatalf("%s: %+v, want REMOTE_AUTHENTICATION_FAILURE", w.name, c)
		}
	}
	if !bytes.Equal(sink.Bytes(), make([]byte, 4096)) {
		t.Fatal("a refused read wrote the sink")
	}
	st, err := pb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if got := st.ReqAuthFailed - base.ReqAuthFailed; got != uint64(len(wrong)) {
		t.Fatalf("server req_auth_failed +%d, want +%d", got, len(wrong))
	}
	if st.ReqServed != base.ReqServed {
		t.Fatalf("server served %d refused requests", st.ReqServed-base.ReqServed)
	}
	stA, _ := pa.Stats()
	if stA.Completed[abi.StatusRemoteAuthFailure.String()] < uint64(len(wrong)) || stA.RxAuthFailed != 0 {
		t.Fatalf("reader's counters: completed %v rx_auth_failed %d", stA.Completed, stA.RxAuthFailed)
	}
	if err := pa.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 99,
		Remote: ipB, RemoteRegion: rb.ID(), RemoteOffset: 100, Key: kdFor(rb, pa),
		Local: sink, Length: 4096,
	}); err != nil {
		t.Fatal(err)
	}
	if c := waitOne(t, pa, 5*time.Second); c.Status != abi.StatusOK || sink.Bytes()[7] != pattern(107) {
		t.Fatalf("the right key: %+v", c)
	}
}

// A local rekey while a reader reads one region continuously: after the
// rekey its reads with the old K_d fail with REMOTE_AUTHENTICATION_FAILURE
// (an answer, not a timeout), the reader fetches a new K_d from the owner
// (in-process here) as soon as it sees a failure, and reads with it
// succeed. Reads of another region of the same owner, in flight the whole
// time, never fail. The window of failed ops is logged, not asserted.
//
// Two paths (paper §5.2, Fig. 14): "driver", the owner's local Rekey
// through the control socket; "op", a REKEY op sent by a control-plane
// app on the reader's engine, authorised by the K_d the owner derived for
// it and the REKEY op type, which then hands out K_d of the new key.
func TestRekeyWhileReading(t *testing.T) {
	t.Run("driver", func(t *testing.T) { rekeyWhileReading(t, false) })
	t.Run("op", func(t *testing.T) { rekeyWhileReading(t, true) })
}

func rekeyWhileReading(t *testing.T, remote bool) {
	a, b := memifPair(t, nil, nil)
	pa, pb := dial(t, a, "reader"), dial(t, b, "owner")
	const size = 64 << 10
	r1 := ownerRegion(t, pb, size, abi.PermRemoteRead|abi.PermRemoteRekey) // rekeyed
	r2, err := pb.RegisterRegion(size, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := 0, r2.Bytes(); i < len(b); i++ {
		b[i] = ^pattern(uint64(i))
	}
	const nslots = 8 // even slots read r1, odd slots r2
	slots, err := pa.AllocSlots(nslots)
	if err != nil {
		t.Fatal(err)
	}
	sink, _ := pa.RegisterRegion(nslots*4096, abi.PermLocalWrite)
	oldKd := kdFor(r1, pa)
	nk := aesni.Key{0x5e, 0xc0, 0x1d, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	var applied atomic.Bool         // the rekeyer knows its new key took effect
	currentKd := func() aesni.Key { // what the reader gets when it asks for K_d
		if !remote {
			return kdFor(r1, pa) // the owner's view: the old key until Rekey returned
		}
		if applied.Load() {
			id := pa.Identity()
			return aesni.DeriveKey(nk, id.Addr.As4(), id.PID, uint8(abi.OpRead))
		}
		return oldKd
	}
	rekey := func() error { return pb.Rekey(r1, nk) }
	if remote {
		pc := dial(t, a, "control-plane")
		cslot, err := pc.AllocSlots(1)
		if err != nil {
			t.Fatal(err)
		}
		keyBuf, err := pc.RegisterRegion(4096, abi.PermLocalRead)
		if err != nil {
			t.Fatal(err)
		}
		copy(keyBuf.Bytes(), nk[:])
		cid := pc.Identity()
		rekeyKd := r1.DeriveKey(cid.Addr, cid.PID, abi.OpRekey)
		rekey = func() error {
			if err := pc.Submit(&portal.Op{
				Type: portal.OpRekey, Slot: cslot[0], Cookie: 1,
				Remote: ipB, RemoteRegion: r1.ID(), Key: rekeyKd,
				Local: keyBuf,
			}); err != nil {
				return err
			}
			c := waitOne(t, pc, 5*time.Second)
			if c.Status != abi.StatusOK || c.Op != abi.OpRekey {
				return fmt.Errorf("REKEY op: %+v", c)
			}
			applied.Store(true)
			return nil
		}
	}

	var rekeyAt atomic.Int64 // unix ns when the owner starts the rekey
	stop := make(chan struct{})
	type result struct {
		ops, r2ops, okOld, okNew, failed int
		firstFail, firstNewOK            time.Time
		maxFailDelay                     time.Duration
		err                              error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		defer func() { done <- res }()
		kd, kd2 := oldKd, kdFor(r2, pa)
		gen := make([]aesni.Key, nslots) // the key each r1 op was posted with
		post := func(k int) error {
			off := uint64(k) * 4096
			if k%2 == 0 {
				gen[k] = kd
				return pa.Post(&portal.Op{
					Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k),
					Remote: ipB, RemoteRegion: r1.ID(), RemoteOffset: off, Key: kd,
					Local: sink, LocalOffset: off, Length: 4096,
				})
			}
			return pa.Post(&portal.Op{
				Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k),
				Remote: ipB, RemoteRegion: r2.ID(), RemoteOffset: off, Key: kd2,
				Local: sink, LocalOffset: off, Length: 4096,
			})
		}
		for k := range nslots {
			if res.err = post(k); res.err != nil {
				return
			}
		}
		pa.Flush()
		cpl := make([]abi.Completion, nslots)
		stopping := false
		for inflight := nslots; inflight > 0; {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n, err := pa.Wait(ctx, cpl)
			cancel()
			if err != nil {
				res.err = fmt.Errorf("no completion within 5 s after %d ops: %v", res.ops, err)
				return
			}
			now := time.Now()
			select {
			case <-stop:
				stopping = true
			default:
			}
			for _, c := range cpl[:n] {
				res.ops++
				inflight--
				k := int(c.Cookie)
				off := k * 4096
				if k%2 == 1 {
					res.r2ops++
					if c.Status != abi.StatusOK || sink.Bytes()[off+9] != ^pattern(uint64(off+9)) {
						res.err = fmt.Errorf("read of the other region failed: %+v", c)
						return
					}
				} else {
					switch {
					case c.Status == abi.StatusOK && gen[k] == oldKd:
						res.okOld++
					case c.Status == abi.StatusOK:
						res.okNew++
						if res.firstNewOK.IsZero() {
							res.firstNewOK = now
						}
					case c.Status == abi.StatusRemoteAuthFailure && gen[k] == oldKd:
						if ra := rekeyAt.Load(); ra == 0 || now.UnixNano() < ra {
							res.err = fmt.Errorf("authentication failure before the rekey: %+v", c)
							return
						}
						res.failed++
						res.maxFailDelay = max(res.maxFailDelay, time.Duration(c.TotalDelayNs))
						if res.firstFail.IsZero() {
							res.firstFail = now
						}
						// Ask for a new K_d (the old one comes back until
						// the rekey has returned).
						kd = currentKd()
					default:
						res.err = fmt.Errorf("read of the rekeyed region with a new key: %+v", c)
						return
					}
					if c.Status == abi.StatusOK && sink.Bytes()[off+9] != pattern(uint64(off+9)) {
						res.err = fmt.Errorf("read %d: data differs", k)
						return
					}
				}
				if !stopping {
					if res.err = post(k); res.err != nil {
						return
					}
					inflight++
				}
			}
			pa.Flush()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	rekeyAt.Store(time.Now().UnixNano())
	if err := rekey(); err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	rekeyed := time.Now()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if !remote && r1.Key() != nk {
		t.Fatal("Key() after Rekey is not the new key")
	}
	if res.okOld == 0 || res.failed == 0 || res.okNew == 0 || res.r2ops == 0 {
		t.Fatalf("ops %d: %d OK with the old key, %d failed, %d OK with the new key, %d of the other region",
			res.ops, res.okOld, res.failed, res.okNew, res.r2ops)
	}
	st, err := pb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	wantRemote := uint64(0)
	if remote {
		wantRemote = 1
	}
	if st.Rekeys != 1 || st.RemoteRekeys != wantRemote || st.ReqAuthFailed != uint64(res.failed) {
		t.Fatalf("server: rekeys %d (remote %d) req_auth_failed %d, reader saw %d failures", st.Rekeys, st.RemoteRekeys, st.ReqAuthFailed, res.failed)
	}
	t.Logf("%d ops (%d of the other region, none failed); rekeyed region: %d OK with the old key, %d failed (slowest failure %v), %d OK with the new key",
		res.ops, res.r2ops, res.okOld, res.failed, res.maxFailDelay, res.okNew)
	t.Logf("rekey path %q: window of failed ops: %v from the first failure to the first OK with the new key; the rekey call took %v",
		map[bool]string{false: "driver", true: "REKEY op"}[remote],
		res.firstNewOK.Sub(res.firstFail), rekeyed.Sub(time.Unix(0, rekeyAt.Load())))
}

// IV counters never repeat across engine restarts (paper Appendix A): the
// serving engine runs three times on the same IV state file, stopped with
// SIGTERM after the first run and SIGKILL after the second; the nonces of
// every frame it sends (captured by a raw AF_PACKET socket on the peer's
// veth, in the peer's network namespace) are unique, and each run's
// counters lie above all of the earlier runs'.
func TestIVsNeverRepeatAcrossRestart(t *testing.T) {
	needEngines(t)
	v, err := testbed.NewVethPair(fmt.Sprintf("ormi%d", os.Getpid()%1000))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("network namespaces unavailable:", err)
	}
	defer v.Close()
	capt, err := startCapture(v.NSA, v.IfA)
	if err != nil {
		t.Fatal(err)
	}
	defer capt.close()
	dir := t.TempDir()
	oa := testbed.AFPacket(rmadBin, dir, "e2e-iva", ipA.String(), v.NSA, v.IfA)
	oa.Extra = relaxed
	a := start(t, oa)
	pa := dial(t, a, "reader")
	slots, err := pa.AllocSlots(8)
	if err != nil {
		t.Fatal(err)
	}
	sink, _ := pa.RegisterRegion(8*4096, abi.PermLocalWrite)
	ra := ownerRegion(t, pa, 64<<10, abi.PermRemoteRead) // B's app reads it: B sends requests too
	ivState := filepath.Join(dir, "b.iv")

	type run struct {
		min, max uint64
		n        int
	}
	var runs []run
	seen := map[[12]byte]int{} // nonce -> run
	for i, how := range []string{"SIGTERM", "SIGKILL", "nothing (still running)"} {
		ob := testbed.AFPacket(rmadBin, dir, fmt.Sprintf("e2e-ivb%d", i), ipB.String(), v.NSB, v.IfB)
		ob.Extra, ob.IVState = relaxed, ivState
		b := start(t, ob)
		pb, err := portal.Dial(b.Socket, "owner")
		if err != nil {
			t.Fatal(err)
		}
		rb := ownerRegion(t, pb, 64<<10, abi.PermRemoteRead)
		kd := kdFor(rb, pa)
		// 64 pipelined 4 KB reads by A of B (B seals response chunks:
		// ranges of counters), then 16 reads by B of A (B seals requests:
		// one counter each).
		for round := range 8 {
			for k, s := range slots {
				off := uint64(round*8+k) % 16 * 4096
				if err := pa.Post(&portal.Op{
					Type: portal.OpRead, Slot: s, Cookie: uint64(k),
					Remote: ipB, RemoteRegion: rb.ID(), RemoteOffset: off, Key: kd,
					Local: sink, LocalOffset: uint64(k) * 4096, Length: 4096,
				}); err != nil {
					t.Fatal(err)
				}
			}
			pa.Flush()
			for _, c := range waitN(t, pa, len(slots), 10*time.Second) {
				if c.Status != abi.StatusOK {
					t.Fatalf("run %d: %+v", i, c)
				}
			}
		}
		bslots, _ := pb.AllocSlots(1)
		bsink, _ := pb.RegisterRegion(4096, abi.PermLocalWrite)
		kdb := kdFor(ra, pb)
		for k := range 16 {
			if err := pb.Submit(&portal.Op{
				Type: portal.OpRead, Slot: bslots[0], Cookie: uint64(k),
				Remote: ipA, RemoteRegion: ra.ID(), RemoteOffset: uint64(k) * 64, Key: kdb,
				Local: bsink, Length: 64,
			}); err != nil {
				t.Fatal(err)
			}
			if c := waitOne(t, pb, 5*time.Second); c.Status != abi.StatusOK || bsink.Bytes()[5] != pattern(uint64(k)*64+5) {
				t.Fatalf("run %d: B's read %d: %+v", i, k, c)
			}
		}
		switch how {
		case "SIGTERM":
			pb.Close()
			if err := b.Stop(10 * time.Second); err != nil {
				t.Fatal(err)
			}
		case "SIGKILL":
			b.Kill()
			pb.Close()
		}
		frames := capt.take(t) // B's frames of this run
		r := run{min: ^uint64(0)}
		for _, f := range frames {
			addr, ctr := aesni.NonceCounter(f.nonce[:])
			if f.src != ipB.As4() {
				continue
			}
			if addr != f.src {
				t.Fatalf("run %d: nonce address %v in a frame from %v", i, addr, f.src)
			}
			if ctr == 0 {
				t.Fatalf("run %d: counter 0 used", i)
			}
			if prev, dup := seen[f.nonce]; dup {
				t.Fatalf("run %d repeats nonce %x of run %d", i, f.nonce, prev)
			}
			seen[f.nonce] = i
			r.n++
			r.min, r.max = min(r.min, ctr), max(r.max, ctr)
		}
		// 64 reads of 4 KB are at least 64x3 chunks; 16 requests.
		if r.n < 64*3+16 {
			t.Fatalf("run %d: captured only %d frames from B", i, r.n)
		}
		for j, p := range runs {
			if r.min <= p.max {
				t.Fatalf("run %d's counters [%d, %d] are not above run %d's [%d, %d]", i, r.min, r.max, j, p.min, p.max)
			}
		}
		runs = append(runs, r)
		t.Logf("run %d (ended by %s): %d frames from B, counters %d..%d", i, how, r.n, r.min, r.max)
	}
}

// frameNonce is one captured OneRMA frame's source and IV field.
type frameNonce struct {
	src   [4]byte
	nonce [12]byte
}

// capture reads every frame arriving at an interface (not those the host
// sends) through a raw AF_PACKET socket and keeps the IV fields of OneRMA
// frames.
type capture struct {
	fd     int
	stop   atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	frames []frameNonce
	idle   uint64 // read timeouts with nothing to read, under mu
	err    error
}

// startCapture opens the socket inside network namespace ns (a locked
// thread enters it and is discarded afterwards) and binds it to iface.
func startCapture(ns, iface string) (*capture, error) {
	type res struct {
		fd  int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := func() (int, error) {
			nsfd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return -1, err
			}
			defer unix.Close(nsfd)
			if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
				return -1, fmt.Errorf("setns %s: %w", ns, err)
			}
			ifi, err := net.InterfaceByName(iface)
			if err != nil {
				return -1, err
			}
			proto := int(htons(unix.ETH_P_ALL))
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
			if err != nil {
				return -1, err
			}
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
			tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				unix.Close(fd)
				return -1, err
			}
			if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
				unix.Close(fd)
				return -1, err
			}
			return fd, nil
		}()
		ch <- res{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, fmt.Errorf("capture on %s in %s: %w", iface, ns, r.err)
	}
	c := &capture{fd: r.fd}
	c.wg.Add(1)
	go c.loop()
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *capture) loop() {
	defer c.wg.Done()
	buf := make([]byte, 1<<16)
	for !c.stop.Load() {
		n, from, err := unix.Recvfrom(c.fd, buf, unix.MSG_TRUNC)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				c.mu.Lock()
				c.idle++
				c.mu.Unlock()
				continue
			}
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n > len(buf) {
			continue
		}
		if f, ok := oneRMANonce(buf[:n]); ok {
			c.mu.Lock()
			c.frames = append(c.frames, f)
			c.mu.Unlock()
		}
	}
}

// oneRMANonce recognises an IPv4/UDP frame to or from a OneRMA port
// (4792 + core) and returns its source address and IV field (frame bytes
// 74..86: Ethernet 14, IPv4 20, UDP 8, then OneRMA header offset 32).
func oneRMANonce(b []byte) (frameNonce, bool) {
	var f frameNonce
	if len(b) < 86+aesni.TagSize || binary.BigEndian.Uint16(b[12:14]) != 0x0800 || b[14] != 0x45 || b[23] != unix.IPPROTO_UDP {
		return f, false
	}
	sport, dport := binary.BigEndian.Uint16(b[34:36]), binary.BigEndian.Uint16(b[36:38])
	isPort := func(p uint16) bool { return p >= 4792 && p < 4792+64 }
	if !isPort(sport) && !isPort(dport) {
		return f, false
	}
	copy(f.src[:], b[26:30])
	copy(f.nonce[:], b[74:86])
	return f, true
}

// take waits until the socket has been drained (two read timeouts in a
// row after the call) and returns the frames captured since the last take.
func (c *capture) take(t *testing.T) []frameNonce {
	t.Helper()
	c.mu.Lock()
	start := c.idle
	c.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		idle, err := c.idle, c.err
		c.mu.Unlock()
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		if idle >= start+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("capture socket never idle")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.frames
	c.frames = nil
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].nonce[:], out[j].nonce[:]) < 0 })
	return out
}

func (c *capture) close() {
	c.stop.Store(true)
	c.wg.Wait()
	unix.Close(c.fd)
}
