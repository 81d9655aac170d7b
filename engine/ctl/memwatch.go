package ctl

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/ctlmsg"
)

// Memory objects are charged until they are gone. A region's memfd and a
// portal's segment cost their tenant memory_bytes (and hugepage_bytes on
// huge pages), a region one regions unit and a segment one portals unit,
// from their creation until the kernel frees them: until the last
// descriptor and mapping of the memfd, the engine's and the
// application's, are gone. The engine lets go of its own when the region
// is deregistered, the memory dropped unregistered or the portal closed;
// an application that keeps a descriptor or a mapping past that keeps
// the memory, and its huge page reservation, alive, and stays charged for
// it, so no tenant holds more than its quota whatever it keeps.
//
// The engine learns that an object is gone from inotify: one instance,
// a watch per object for IN_DELETE_SELF, added on "/proc/self/fd/N"
// before the descriptor is handed out. The watch does not pin the inode:
// when the last reference and mapping go, the kernel evicts the inode and
// queues IN_DELETE_SELF, then IN_IGNORED (the watch's end), on which the
// charge is refunded. Both are queued before the syscall that let go of
// the last reference returns (munmap, close, exit), so before the
// application's next request reaches the engine: a request the pools
// would refuse first reads the pending events, without blocking
// (drainMem), and is decided on the books they leave. A goroutine reads
// them otherwise, as they come.
//
// The queue cannot overflow: each watch yields at most two events, and
// the engine watches at most half of fs.inotify.max_queued_events objects
// at once (a pool of its own, engine-wide: refusals name it). An overflow
// would lose refunds: it is a broken invariant, and crashes.

// memWatch is the engine's inotify instance.
type memWatch struct {
	f   *os.File
	rc  syscall.RawConn
	max int // objects watched at once: half of max_queued_events

	mu  sync.Mutex // one reader at a time, its refunds applied before the next reads
	buf []byte

	done chan struct{}
}

// memObj is one watched memory object: its tenant, and what it costs.
type memObj struct {
	t   *tenant
	use amounts
}

// maxQueuedEventsPath is the inotify queue's length, per instance.
const maxQueuedEventsPath = "/proc/sys/fs/inotify/max_queued_events"

// newMemWatch opens the inotify instance, to watch at most max objects
// (0: half of max_queued_events, which is also the most). The caller
// starts its reader (Server.watchMemLoop).
func newMemWatch(max int) (*memWatch, error) {
	b, err := os.ReadFile(maxQueuedEventsPath)
	if err != nil {
		return nil, fmt.Errorf("ctl: %w", err)
	}
	q, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || q < 2 {
		return nil, fmt.Errorf("ctl: %s = %q, want a count of at least 2", maxQueuedEventsPath, b)
	}
	if max == 0 {
		max = q / 2
	}
	if max > q/2 {
		return nil, fmt.Errorf("%w: MaxMemoryObjects %d exceeds half of %s (%d): raise the sysctl", ErrConfig, max, maxQueuedEventsPath, q)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("ctl: inotify_init1: %w", err)
	}
	f := os.NewFile(uintptr(fd), "onerma-memwatch") // non-blocking: the runtime's poller waits for it
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ctl: inotify: %w", err)
	}
	return &memWatch{f: f, rc: rc, max: max, buf: make([]byte, 64<<10), done: make(chan struct{})}, nil
}

// watchMemLoop reads the inotify events as they come, until close.
func (s *Server) watchMemLoop() {
	w := s.mem
	defer close(w.done)
	w.rc.Read(func(fd uintptr) bool { // returns once f is closed
		w.mu.Lock()
		s.readMemEvents(int(fd))
		w.mu.Unlock()
		return false // wait for more
	})
}

// drainMem reads, without blocking, every inotify event pending, and
// refunds the objects gone. When it returns, every object whose last
// reference went before it was called is refunded.
func (s *Server) drainMem() {
	w := s.mem
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rc.Control(func(fd uintptr) { s.readMemEvents(int(fd)) })
}

// readMemEvents reads fd until it has no event left. Call with w.mu held.
func (s *Server) readMemEvents(fd int) {
	w := s.mem
	for {
		n, err := unix.Read(fd, w.buf)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return
		case err != nil:
			s.log.Error().Err(err).Msg("reading inotify events: refunds of memory objects wait")
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				panic("ctl: the inotify queue overflowed although the engine watches at most half as many memory objects as it holds events: refunds were lost")
			case ev.Mask&unix.IN_IGNORED != 0: // after IN_DELETE_SELF: the watch, and the object, are gone
				s.memGone(ev.Wd)
			}
		}
	}
}

// memGone refunds the object watched by wd.
func (s *Server) memGone(wd int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.memObjs[wd]
	if o == nil {
		panic(fmt.Sprintf("ctl: inotify watch %d ended, and no memory object had it", wd))
	}
	delete(s.memObjs, wd)
	s.refundLocked(o.t, o.use)
}

// chargeMem charges t for a memory object costing use (pool.admit,
// draining first as charge does), and takes one of the engine's watched
// objects for it. Then create the object and watchMem it, or, if it
// cannot be created, unchargeMem.
func (s *Server) chargeMem(op ctlmsg.Op, t *tenant, use ctlmsg.TenantUsage) *reqError {
	a := amountsOf(use)
	for try := 0; ; try++ {
		s.mu.Lock()
		var r *refusal
		full := len(s.memObjs)+s.memPending >= s.mem.max
		if !full {
			if r = s.chargeLocked(t, a); r == nil {
				s.memPending++
			}
		}
		n := len(s.memObjs) + s.memPending
		s.mu.Unlock()
		switch {
		case !full && r == nil:
			return nil
		case try == 0:
			s.drainMem()
		case full:
			return fail(ctlmsg.CodeResource, "%s: the engine's tenants hold %d memory objects, as many as it watches at once (MaxMemoryObjects: at most half of %s)",
				op, n, maxQueuedEventsPath)
		default:
			return refusalError(string(op), t, r)
		}
	}
}

// unchargeMem refunds a charge of chargeMem whose object was not created.
func (s *Server) unchargeMem(t *tenant, use ctlmsg.TenantUsage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.memPending--
	s.refundLocked(t, amountsOf(use))
}

// watchMem watches the object created after chargeMem: from now on its
// charge is refunded when it is gone. On error the caller releases it
// and unchargeMem's.
func (s *Server) watchMem(m *shm, t *tenant, use ctlmsg.TenantUsage) error {
	var (
		wd  int
		err error
	)
	path := "/proc/self/fd/" + strconv.Itoa(m.fd)
	if cerr := s.mem.rc.Control(func(fd uintptr) { wd, err = unix.InotifyAddWatch(int(fd), path, unix.IN_DELETE_SELF) }); cerr != nil {
		return fmt.Errorf("inotify: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("inotify_add_watch %s: %w", path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.memObjs[int32(wd)] != nil {
		panic(fmt.Sprintf("ctl: inotify watch %d given to a second memory object", wd))
	}
	s.memPending--
	s.memObjs[int32(wd)] = &memObj{t: t, use: amountsOf(use)}
	return nil
}

// MemoryObjects reports the memory objects charged to tenants now, and
// the most the engine watches at once.
func (s *Server) MemoryObjects() (n, max int) {
	s.drainMem()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.memObjs), s.mem.max
}

// closeMemWatch stops the reader and closes the instance; the charges it
// would have refunded die with the server.
func (s *Server) closeMemWatch() error {
	err := s.mem.f.Close()
	<-s.mem.done
	return err
}
