package soak

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/wire"
)

// capture reads the headers of every OneRMA frame an engine of the
// testbed sends, for the whole run, from one AF_PACKET socket in the
// router's network namespace. Every engine's frames enter that namespace
// once: on the router's end of the engine's veth, or on the tap
// interface of the engine that runs there. The socket is bound to no
// interface, so it sees a restarted engine's new tap at once. A
// classic BPF filter in the kernel keeps only IPv4/UDP frames coming
// into an interface that is not a bridge (a frame forwarded, bridged or
// sent by the router shows again as outgoing, and one for the router
// again on its bridge), and only their first wire.PayloadOffset bytes:
// Ethernet, IPv4, UDP and OneRMA headers, the nonce among them. The
// frames arrive in a TPACKET_V2 ring mapped into this process, read
// without a system call per frame.
type capture struct {
	fd     int
	ring   []byte
	frames int
	next   int
	nonces *nonceSet

	stop atomic.Bool
	done chan struct{}
	err  error // what ended the reader early

	// Counted by the reader; read after done.
	Captured uint64            // frames the filter passed
	ByType   [16]uint64        // OneRMA frames by wire.Type
	NotRMA   uint64            // UDP frames that are not OneRMA (wire.Decode refused them)
	Nonces   uint64            // OneRMA frames whose nonce counted (not repeated, foreign or mismatched)
	Drops    uint64            // frames the kernel could not put in the ring (PACKET_STATISTICS)
	scratch  [9216 + 64]byte   // a frame's headers at their offsets, for wire.Decode
	fields   wire.Fields       // decoded headers
	lastErrs map[string]uint64 // wire.Decode's errors, by text
}

// Ring geometry: 2^18 frames of 256 bytes (the tpacket2 header, the
// link-layer address and 90 bytes of headers fit), 64 MB: seconds of
// frames at the soak's rates if the reader falls behind.
const (
	capFrameSize = 256
	capBlockSize = 1 << 20
	capBlocks    = 64
)

// openCapture opens the socket in network namespace ns (a name under
// /var/run/netns), leaving out frames arriving on the bridges named.
func openCapture(ns string, bridges []string, nonces *nonceSet) (*capture, error) {
	type result struct {
		fd  int
		err error
	}
	res := make(chan result, 1)
	go func() {
		// The thread enters the namespace and is never given back: it
		// ends with the goroutine (no UnlockOSThread). The socket stays
		// in the namespace it was made in.
		runtime.LockOSThread()
		fd, err := openCaptureSocket(ns, bridges)
		res <- result{fd, err}
	}()
	r := <-res
	if r.err != nil {
		return nil, fmt.Errorf("soak: capture in %s: %w", ns, r.err)
	}
	c := &capture{fd: r.fd, frames: capBlockSize / capFrameSize * capBlocks, nonces: nonces,
		done: make(chan struct{}), lastErrs: map[string]uint64{}}
	ring, err := unix.Mmap(r.fd, 0, capBlockSize*capBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(r.fd)
		return nil, fmt.Errorf("soak: capture: mapping the ring: %w", err)
	}
	c.ring = ring
	// Frames may come before the reader starts: the ring holds them.
	if err := unix.Bind(r.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL)}); err != nil {
		c.close()
		return nil, fmt.Errorf("soak: capture: bind: %w", err)
	}
	go c.read()
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openCaptureSocket runs on a locked thread: it enters ns and makes the
// socket there, with its filter and ring, not yet bound (no frame yet).
func openCaptureSocket(ns string, bridges []string) (int, error) {
	nsf, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return -1, err
	}
	defer nsf.Close()
	if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("setns: %w", err)
	}
	var skip []uint32
	for _, b := range bridges {
		ifi, err := net.InterfaceByName(b)
		if err != nil {
			return -1, fmt.Errorf("bridge %s: %w", b, err)
		}
		skip = append(skip, uint32(ifi.Index))
	}
	prog, err := captureFilter(skip)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return fail("PACKET_VERSION", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		return fail("SO_ATTACH_FILTER", err)
	}
	req := unix.TpacketReq{Block_size: capBlockSize, Block_nr: capBlocks, Frame_size: capFrameSize,
		Frame_nr: capBlockSize / capFrameSize * capBlocks}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fail("PACKET_RX_RING", err)
	}
	return fd, nil
}

// captureFilter keeps IPv4/UDP frames that come into an interface other
// than those of skip, truncated to their headers.
func captureFilter(skip []uint32) ([]bpf.RawInstruction, error) {
	// Every jump to "drop" skips to the last instruction.
	var prog []bpf.Instruction
	drop := func(cond bpf.JumpTest, val uint32) bpf.Instruction {
		return bpf.JumpIf{Cond: cond, Val: val} // SkipTrue set below
	}
	prog = append(prog,
		bpf.LoadExtension{Num: bpf.ExtType},
		drop(bpf.JumpEqual, unix.PACKET_OUTGOING),
		bpf.LoadExtension{Num: bpf.ExtInterfaceIndex})
	for _, i := range skip {
		prog = append(prog, drop(bpf.JumpEqual, i))
	}
	prog = append(prog,
		bpf.LoadAbsolute{Off: 12, Size: 2},
		drop(bpf.JumpNotEqual, wire.EtherTypeIPv4),
		bpf.LoadAbsolute{Off: wire.EthLen + 9, Size: 1},
		drop(bpf.JumpNotEqual, unix.IPPROTO_UDP),
		bpf.RetConstant{Val: wire.PayloadOffset},
		bpf.RetConstant{Val: 0})
	last := len(prog) - 1
	for i, in := range prog {
		if j, ok := in.(bpf.JumpIf); ok {
			j.SkipTrue = uint8(last - i - 1)
			prog[i] = j
		}
	}
	return bpf.Assemble(prog)
}

// read runs until Stop: it takes each frame the kernel hands over, in
// order, decodes its headers with wire.Decode and records its nonce.
func (c *capture) read() {
	defer close(c.done)
	pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
	for {
		off := c.next * capFrameSize
		h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&c.ring[off]))
		if atomic.LoadUint32(&h.Status)&unix.TP_STATUS_USER == 0 {
			stopping := c.stop.Load()
			timeout := 50
			if stopping {
				timeout = 0 // drained: the engines have stopped sending
			}
			n, err := unix.Poll(pfd, timeout)
			if err != nil && !errors.Is(err, unix.EINTR) {
				c.err = fmt.Errorf("poll: %w", err)
				return
			}
			if n == 0 && stopping {
				return
			}
			continue
		}
		c.frame(h, off)
		atomic.StoreUint32(&h.Status, unix.TP_STATUS_KERNEL)
		c.next = (c.next + 1) % c.frames
	}
}

// frame handles the frame whose tpacket2 header h is at ring offset off.
func (c *capture) frame(h *unix.Tpacket2Hdr, off int) {
	c.Captured++
	n, snap := int(h.Len), int(h.Snaplen)
	if n > len(c.scratch) || snap > n || int(h.Mac)+snap > capFrameSize {
		c.NotRMA++
		c.lastErrs["frame longer than a jumbo frame"]++
		return
	}
	// wire.Decode reads the headers and checks the lengths of the
	// frame as sent; it never reads the payload, which the filter did
	// not copy (the scratch holds stale bytes there).
	copy(c.scratch[:snap], c.ring[off+int(h.Mac):off+int(h.Mac)+snap])
	if _, err := wire.Decode(c.scratch[:n], &c.fields); err != nil {
		c.NotRMA++
		c.lastErrs[err.Error()]++
		return
	}
	f := &c.fields
	c.ByType[f.Type&15]++
	ts := int64(h.Sec)*1e9 + int64(h.Nsec)
	if c.nonces.add(f.SrcIP, binary.BigEndian.Uint32(f.IV[0:4]), binary.BigEndian.Uint64(f.IV[4:12]), ts) {
		c.Nonces++
	}
}

// Stop waits until the reader has taken every frame in the ring (call it
// once the engines have stopped), reads the kernel's drop counter and
// releases the socket.
func (c *capture) Stop() error {
	c.stop.Store(true)
	<-c.done
	st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err == nil {
		c.Drops += uint64(st.Drops)
	}
	c.close()
	return errors.Join(c.err, err)
}

func (c *capture) close() {
	if c.ring != nil {
		unix.Munmap(c.ring)
		c.ring = nil
	}
	unix.Close(c.fd)
}
