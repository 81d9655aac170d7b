package portal

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
)

// Identity is what the engine stamps on this portal's requests.
type Identity struct {
	Addr netip.Addr // the engine's IPv4 address
	// PID is the identity the engine gave this process: a number it
	// allocated, not the process's PID, the same for every portal of the
	// process and never another process's, whatever PID namespace either
	// runs in. It is what K_d is derived for (Region.DeriveKey).
	PID    uint32
	UID    uint32
	GID    uint32
	Name   string // the portal's name: a label for logs
	Tenant string // the tenant the engine charges this portal to
}

// Options tune Dial. Zero values take the engine's defaults.
type Options struct {
	CmdCap uint32 // command ring capacity (power of two)
	CplCap uint32 // completion ring capacity (power of two)
	Class  Class  // class of service to ask for (ErrClass if the engine's policy does not grant it)
	// Timeout bounds each control request (default 60 s: registering a
	// large region populates its memory).
	Timeout time.Duration
	// WaitSpins is how many polls Wait spins before it sleeps (0: the
	// default; negative: none, for an application that shares its CPU
	// with an engine, where spinning only delays the engine).
	WaitSpins int
	// PinCore asks for engine core Core to serve the portal (every op of
	// a portal runs on one polling core of the engine); without it the
	// engine picks its least loaded core. An application that wants
	// several cores opens a portal per thread, each on its own core.
	PinCore bool
	Core    int
}

// Portal is an open CommandPortal. See the package doc for the life cycle
// and concurrency rules.
type Portal struct {
	// Data path. Only the owning goroutine touches these.
	cmd    *abi.Producer
	cpl    *abi.Consumer
	closed bool
	free   []abi.SlotID         // stack of free owned slots
	owned  map[abi.SlotID]int32 // slot -> index in isFree
	isFree []bool
	// Ops posted and not seen completed (track.go): by owned slot
	// (index as in isFree), and those naming other slots.
	pending []pendingOp
	stray   []pendingOp
	// Once the engine is gone (gone.go): dead is what Poll saw, and
	// drained tells that the completion ring has been emptied since, so
	// Poll reports the recorded ops (from pending[synthAt] on, then
	// stray) and never reads the ring again.
	dead    *EngineGoneError
	drained bool
	synthAt int

	// Completion doorbell (see Wait): the arm word in the segment and
	// the eventfd the engine writes when it finds it armed.
	arm    *atomic.Uint32 // nil: no doorbell
	bellFD int
	spins  int
	pfd    [1]unix.PollFd
	evbuf  [8]byte

	// The core's summary doorbell (abi.Summary; nil: the engine gives
	// none, and reads the command ring in every poll): Flush rings the
	// portal's bit after every publication. sumMem is its mapping.
	sum    *abi.Summary
	sumMem []byte

	// The engine's departure, seen by the watcher or a control request
	// (any goroutine), and the watcher's epoll instance (startWatch).
	gone      atomic.Pointer[EngineGoneError]
	watchConn io.Closer
	watchDone chan struct{}

	// Control path.
	mu       sync.Mutex
	conn     *net.UnixConn
	path     string // the control socket, name and options as given
	name     string // to Dial, for Redial
	opt      Options
	timeout  time.Duration
	nextID   uint64
	id       Identity
	portal   uint32
	core     int
	class    abi.Class
	maxSlots int
	hugetlb  bool
	layout   abi.Layout
	seg      []byte // the mapping (MapSize bytes)
	regions  map[abi.RegionID]*Region
	rbuf     []byte
}

// Dial connects to the engine at socketPath and opens a portal named name
// with the engine's default ring sizes.
func Dial(socketPath, name string) (*Portal, error) {
	return DialOptions(socketPath, name, Options{})
}

// DialOptions is Dial with options.
func DialOptions(socketPath, name string, opt Options) (*Portal, error) {
	if err := ctlmsg.ValidName(name); err != nil {
		return nil, fmt.Errorf("portal: %w", err)
	}
	if opt.Class > abi.ClassHigh {
		return nil, fmt.Errorf("portal: Options.Class = %d, want portal.ClassLow or portal.ClassHigh", opt.Class)
	}
	if opt.PinCore && (opt.Core < 0 || opt.Core >= ctlmsg.MaxCores) {
		return nil, fmt.Errorf("portal: Options.Core = %d, want 0..%d", opt.Core, ctlmsg.MaxCores-1)
	}
	asked := opt // for Redial: the options as given, before the defaults
	if opt.Timeout <= 0 {
		opt.Timeout = 60 * time.Second
	}
	switch {
	case opt.WaitSpins == 0:
		opt.WaitSpins = waitSpins
	case opt.WaitSpins < 0:
		opt.WaitSpins = 0
	}
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socketPath, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("portal: connecting to the engine: %w", err)
	}
	p := &Portal{
		spins:   opt.WaitSpins,
		conn:    uc,
		path:    socketPath,
		name:    name,
		opt:     asked,
		timeout: opt.Timeout,
		owned:   make(map[abi.SlotID]int32),
		regions: make(map[abi.RegionID]*Region),
		rbuf:    make([]byte, ctlmsg.MaxResponseBytes+1),
	}
	req := ctlmsg.Request{Op: ctlmsg.OpOpen, Name: name, CmdCap: opt.CmdCap, CplCap: opt.CplCap, PinCore: opt.PinCore, Core: uint32(opt.Core)}
	if opt.Class == abi.ClassHigh {
		req.Class = abi.ClassHigh.String()
	}
	resp, fd, err := p.roundTrip(&req)
	if err != nil {
		uc.Close()
		return nil, err
	}
	if err := p.attach(resp.Open, fd); err != nil {
		if p.seg != nil {
			unix.Munmap(p.seg)
		}
		uc.Close()
		return nil, err
	}
	// The completion doorbell lets Wait sleep instead of spin. An engine
	// that cannot give one leaves Wait to poll with backoff.
	if _, bfd, err := p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpDoorbell}); err == nil && bfd >= 0 {
		p.bellFD = bfd
		p.arm = (*atomic.Uint32)(unsafe.Pointer(&p.seg[abi.SegmentArmOff]))
		p.pfd[0] = unix.PollFd{Fd: int32(bfd), Events: unix.POLLIN}
	}
	// The summary doorbell spares the engine a read of this portal's
	// command ring in every poll. An engine without one (an older one,
	// or ctl.no_summary) refuses, and reads the ring in every poll.
	if r, sfd, err := p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpSummary}); err == nil && sfd >= 0 {
		p.useSummary(r.Summary, sfd)
	}
	if err := p.startWatch(); err != nil {
		p.Close()
		return nil, fmt.Errorf("portal: %w", err)
	}
	return p, nil
}

// useSummary maps the summary doorbell whose memfd fd the engine passed
// (and closes fd), and says in the segment that this portal rings it
// (abi.SegmentSummaryOff). A reply that does not describe a summary
// covering this portal leaves the portal without one.
func (p *Portal) useSummary(r *ctlmsg.SummaryReply, fd int) {
	if r == nil || r.Size == 0 || r.Size%8 != 0 || r.Size > r.MapSize || uint64(p.portal) >= r.Size*8 {
		unix.Close(fd)
		return
	}
	mem, err := mapFD(fd, r.MapSize)
	if err != nil {
		return
	}
	sum, err := abi.NewSummary(mem[:r.Size])
	if err != nil {
		unix.Munmap(mem)
		return
	}
	p.sum, p.sumMem = sum, mem
	// From the engine's next fallback scan on, it reads the command ring
	// only when Flush rings.
	(*atomic.Uint32)(unsafe.Pointer(&p.seg[abi.SegmentSummaryOff])).Store(abi.SummaryOn)
}

// Summary reports whether Flush rings the core's summary doorbell (the
// engine then reads the command ring only when rung, and in its fallback
// scans).
func (p *Portal) Summary() bool { return p.sum != nil }

// attach maps the portal segment the engine created (faulting it in), asks
// the engine to attach it (the engine seals it, starts serving it and
// writes its header), then validates the header against the engine's
// replies and attaches to the rings.
func (p *Portal) attach(o *ctlmsg.OpenReply, fd int) error {
	if o == nil || fd < 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		return errors.New("portal: open: the engine's reply has no segment")
	}
	addr, err := netip.ParseAddr(o.Addr)
	if err != nil || !addr.Is4() {
		unix.Close(fd)
		return fmt.Errorf("portal: open: engine address %q is not IPv4", o.Addr)
	}
	class, ok := abi.ParseClass(o.Class)
	if !ok || o.Class == "" {
		unix.Close(fd)
		return fmt.Errorf("portal: open: the engine's reply grants class %q, want %q or %q", o.Class, abi.ClassLow, abi.ClassHigh)
	}
	if p.seg, err = mapFD(fd, o.MapSize); err != nil {
		return fmt.Errorf("portal: open: %w", err)
	}
	resp, _, err := p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpAttach})
	if err != nil {
		return err
	}
	a := resp.Attach
	if a == nil {
		return errors.New("portal: attach: the engine's reply has no portal")
	}
	seg := p.seg
	l, err := abi.DecodeLayout(seg)
	if err == nil && (l.Portal != a.Portal || l.CmdCap != o.CmdCap || l.CplCap != o.CplCap || l.Size != o.Size) {
		err = fmt.Errorf("segment header %+v disagrees with the engine's replies %+v, %+v", l, *o, *a)
	}
	var (
		cmd *abi.Producer
		cpl *abi.Consumer
	)
	if err == nil {
		cmd, err = abi.NewProducer(l.CmdRing(seg), l.CmdCap, abi.CommandSize)
	}
	if err == nil {
		cpl, err = abi.NewConsumer(l.CplRing(seg), l.CplCap, abi.CompletionSize)
	}
	if err != nil {
		return fmt.Errorf("portal: attach: %w", err)
	}
	p.layout, p.cmd, p.cpl, p.class = l, cmd, cpl, class
	p.stray = make([]pendingOp, 0, int(l.CmdCap)+int(l.CplCap))
	p.portal, p.core, p.maxSlots, p.hugetlb = a.Portal, int(a.Core), o.MaxSlots, o.Hugetlb
	p.id = Identity{Addr: addr, PID: o.PID, UID: o.UID, GID: o.GID, Name: o.Name, Tenant: o.Tenant}
	return nil
}

// mapFD maps size bytes of a memfd from the engine, faulting every page
// in (so this process, not the engine, is charged for the memory, and the
// engine finds it all in memory when it checks), and closes the fd. It
// checks the file really is that large first: touching a mapping beyond
// the end of its file would be SIGBUS.
func mapFD(fd int, size uint64) ([]byte, error) {
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat of the engine's memfd: %w", err)
	}
	if size == 0 || size > 1<<40 || uint64(st.Size) < size {
		return nil, fmt.Errorf("engine's memfd holds %d bytes, reply says map %d", st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap of %d bytes: %w", size, err)
	}
	return mem, nil
}

// roundTrip sends one request and reads its response and the file
// descriptor that comes with it (-1 if none). Engine failures come back as
// *Error; a connection the engine closed, or that failed, as an
// *EngineGoneError (wrapped with the request's op), which the portal
// keeps (Gone).
func (p *Portal) roundTrip(req *ctlmsg.Request) (ctlmsg.Response, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return ctlmsg.Response{}, -1, ErrClosed
	}
	if g := p.gone.Load(); g != nil {
		return ctlmsg.Response{}, -1, fmt.Errorf("portal: %s: %w", req.Op, g)
	}
	p.nextID++
	req.V, req.ID = ctlmsg.Version, p.nextID
	if err := p.conn.SetDeadline(time.Now().Add(p.timeout)); err != nil {
		return ctlmsg.Response{}, -1, fmt.Errorf("portal: %s: %w", req.Op, err)
	}
	if _, err := p.conn.Write(ctlmsg.EncodeRequest(req)); err != nil {
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
			return ctlmsg.Response{}, -1, fmt.Errorf("portal: %s: %w", req.Op, p.markGone(fmt.Errorf("%w: %w", errHangUp, err)))
		}
		return ctlmsg.Response{}, -1, fmt.Errorf("portal: %s: sending to the engine: %w", req.Op, err)
	}
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := p.conn.ReadMsgUnix(p.rbuf, oob)
	if err != nil {
		if errors.Is(err, unix.ECONNRESET) {
			return ctlmsg.Response{}, -1, fmt.Errorf("portal: %s: %w", req.Op, p.markGone(fmt.Errorf("%w: %w", errHangUp, err)))
		}
		return ctlmsg.Response{}, -1, fmt.Errorf("portal: %s: reading the engine's reply: %w", req.Op, err)
	}
	fds := receivedFDs(oob[:oobn])
	fd := -1
	if len(fds) > 0 {
		fd = fds[0]
		for _, extra := range fds[1:] {
			unix.Close(extra)
		}
	}
	failf := func(format string, args ...any) (ctlmsg.Response, int, error) {
		if fd >= 0 {
			unix.Close(fd)
		}
		return ctlmsg.Response{}, -1, fmt.Errorf("portal: %s: "+format, append([]any{req.Op}, args...)...)
	}
	switch {
	case n == 0 && oobn == 0:
		return ctlmsg.Response{}, -1, fmt.Errorf("portal: %s: %w", req.Op, p.markGone(errHangUp))
	case flags&unix.MSG_TRUNC != 0 || n > ctlmsg.MaxResponseBytes:
		return failf("reply longer than %d bytes", ctlmsg.MaxResponseBytes)
	case flags&unix.MSG_CTRUNC != 0:
		return failf("reply's file descriptors truncated")
	}
	resp, err := ctlmsg.DecodeResponse(p.rbuf[:n])
	if err != nil {
		return failf("%v", err)
	}
	if resp.ID != req.ID && !(resp.ID == 0 && resp.Error != "") { // ID 0: a refusal before any request was read
		return failf("reply to request %d, want %d", resp.ID, req.ID)
	}
	if resp.Error != "" {
		if fd >= 0 {
			unix.Close(fd)
		}
		return resp, -1, &Error{Op: req.Op, Code: resp.Code, Msg: resp.Error, Quota: resp.Quota}
	}
	return resp, fd, nil
}

func receivedFDs(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var all []int
	for i := range msgs {
		if fds, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			all = append(all, fds...)
		}
	}
	return all
}

// Identity returns the address and the process identity (PID) the engine
// stamps on this portal's requests. Every portal of a process has the
// same.
func (p *Portal) Identity() Identity { return p.id }

// Class is the portal's class of service, as the engine granted it at
// open (the one Options.Class asked for).
func (p *Portal) Class() Class { return p.class }

// Core is the engine core that serves the portal (0 on an engine of one
// core).
func (p *Portal) Core() int { return p.core }

// MaxSlots is this application's slot cap (engine policy).
func (p *Portal) MaxSlots() int { return p.maxSlots }

// Hugetlb reports whether the portal segment is backed by huge pages.
func (p *Portal) Hugetlb() bool { return p.hugetlb }

// Layout returns the portal segment's layout (ring capacities).
func (p *Portal) Layout() abi.Layout { return p.layout }

// AllocSlots asks the engine for n more command slots, adds them to the
// free list (see Slot) and returns them. Over the cap, the engine's error
// says precisely by how much (errors.Is(err, ErrSlotCap)).
func (p *Portal) AllocSlots(n int) ([]SlotID, error) {
	if n < 1 || n > ctlmsg.MaxAllocSlots {
		return nil, fmt.Errorf("portal: alloc_slots: n = %d, want 1..%d", n, ctlmsg.MaxAllocSlots)
	}
	resp, _, err := p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpAllocSlots, N: uint32(n)})
	if err != nil {
		return nil, err
	}
	if len(resp.Slots) != n {
		return nil, fmt.Errorf("portal: alloc_slots: the engine gave %d slots, asked %d", len(resp.Slots), n)
	}
	out := make([]abi.SlotID, n)
	for i, s := range resp.Slots {
		id := abi.SlotID(s)
		out[i] = id
		if _, dup := p.owned[id]; dup {
			return nil, fmt.Errorf("portal: alloc_slots: the engine gave slot %d twice", id)
		}
		p.owned[id] = int32(len(p.isFree))
		p.isFree = append(p.isFree, true)
		p.pending = append(p.pending, pendingOp{})
		p.free = append(p.free, id)
	}
	return out, nil
}

// Slots reports how many slots the portal owns.
func (p *Portal) Slots() int { return len(p.isFree) }

// FreeSlots reports how many owned slots are free.
func (p *Portal) FreeSlots() int { return len(p.free) }

// Slot takes a free slot (false when all are in use).
func (p *Portal) Slot() (SlotID, bool) {
	n := len(p.free)
	if n == 0 {
		return 0, false
	}
	s := p.free[n-1]
	p.free = p.free[:n-1]
	p.isFree[p.owned[s]] = false
	return s, true
}

// Release returns a slot to the free list, normally after reading its
// completion. It fails with ErrSlot on a slot the portal does not own or
// that is already free.
func (p *Portal) Release(s SlotID) error {
	i, ok := p.owned[s]
	if !ok || p.isFree[i] {
		return ErrSlot
	}
	p.isFree[i] = true
	p.free = append(p.free, s) // never grows past the owned count: no allocation
	return nil
}

// Stats returns the engine's counters.
func (p *Portal) Stats() (*ctlmsg.Stats, error) {
	resp, _, err := p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpStats})
	if err != nil {
		return nil, err
	}
	if resp.Stats == nil {
		return nil, errors.New("portal: stats: the engine's reply has no stats")
	}
	return resp.Stats, nil
}

// Moderate moderates the engine's completion doorbell, as ibv_modify_cq
// moderates a completion queue's events: a Wait asleep on the doorbell is
// woken once count completions are ready, or period after the first of
// them, whichever comes first. An application that keeps many ops in
// flight and sleeps between them is woken (and the engine pays for a
// wake-up) once per count completions instead of once per burst; one with
// fewer than count in flight waits the period for its last completions.
// count 1 with period 0 undoes it. count is 1 .. the completion ring's
// capacity, and period 1 µs .. 1 ms when count > 1, in whole µs.
// A portal without a doorbell (Doorbell false) returns ErrBadRequest
// without asking; an engine older than moderation refuses it the same way.
func (p *Portal) Moderate(count int, period time.Duration) error {
	if p.arm == nil {
		return fmt.Errorf("%w: moderate: the portal has no completion doorbell", ErrBadRequest)
	}
	if count < 1 || count > ctlmsg.MaxRingCap || period < 0 || period > ctlmsg.MaxModerationUs*time.Microsecond || period%time.Microsecond != 0 {
		return fmt.Errorf("%w: moderate: count %d, period %v: want count 1..%d and period 0..%d µs in whole µs",
			ErrBadRequest, count, period, ctlmsg.MaxRingCap, ctlmsg.MaxModerationUs)
	}
	_, _, err := p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpModerate, Count: uint32(count), PeriodUs: uint32(period / time.Microsecond)})
	return err
}

// Close closes the control connection (the engine reclaims the portal, its
// slots and its regions) and unmaps the segment and every region: slices
// returned by Region.Bytes must not be used afterwards. The engine charges
// the tenant for that memory until both have let go of it. Commands still
// in flight complete into nothing. Close is idempotent.
func (p *Portal) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	var err error
	if p.watchConn != nil {
		// The engine sees the connection close only once both
		// descriptors are closed; and the watcher may write the
		// doorbell (markGone) until it has returned.
		err = p.watchConn.Close()
		<-p.watchDone
		p.watchConn = nil
	}
	err = errors.Join(err, p.conn.Close())
	p.conn = nil
	p.closed = true
	for id, r := range p.regions {
		err = errors.Join(err, r.unmap())
		delete(p.regions, id)
	}
	if p.arm != nil {
		err = errors.Join(err, unix.Close(p.bellFD))
		p.bellFD, p.arm = -1, nil
	}
	if p.sumMem != nil {
		err = errors.Join(err, unix.Munmap(p.sumMem))
		p.sum, p.sumMem = nil, nil
	}
	if p.seg != nil {
		err = errors.Join(err, unix.Munmap(p.seg))
		p.seg, p.cmd, p.cpl = nil, nil, nil
	}
	return err
}

// Doorbell reports whether Wait sleeps on the engine's completion doorbell
// (rather than polling with backoff).
func (p *Portal) Doorbell() bool { return p.arm != nil }
