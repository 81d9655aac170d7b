"""Portals and regions: a CommandPortal on the engine (libonerma's struct
onerma_portal) and the shared-memory regions registered through it.

A Portal owns its slots, its regions and a scratch region of its own:

    portal ──── slots        allocated at dial; the free ones in a Python list
       │  ├──── regions      Region: id, size, perm, .view (memoryview), .numpy()
       │  └──── scratch      slots × 4 KB, LOCAL_READ | LOCAL_WRITE: where read()
       │                     lands data and write() takes it from, one 4 KB area
       │                     per slot, when the caller names no region
       └──── ready           completions of the caller's ops that read() or
                             write() took from the ring while waiting for
                             their own; the next poll() or wait() returns them

Ops. read() and write() post and wait: a transfer of any length is split
into ops of at most 4 KB, posted as slots free up, and the call returns
once every op completed (or raises the first failure's StatusError after
every op completed); lookup() posts one LOOKUP and waits. The batch API
posts ops without waiting (post_read, post_write, post_rekey,
post_lookup), publishes them (flush, or the next poll or wait) and hands
back their completions (poll, which never blocks, and wait).

Cookies. The caller's cookies are below 2^63. read(), write() and lookup() use
cookies with bit 63 set and a generation number, so a completion of an op
they gave up on (Timeout) is recognised and dropped when it comes.

Thread safety: a Portal and its regions are not safe for concurrent use
(as package portal and libonerma say): use each from one thread, or
serialise every call yourself. ctypes releases the GIL while a call waits.
"""

import collections
import ctypes
import errno as _errno
import struct
import sys

from . import _lib
from .errors import OnermaError, error, status_error
from .types import (
    FLAG_LOOKUP_BUCKET,
    KEY_SIZE,
    MAX_OP_BYTES,
    BucketLayout,
    Class,
    Completion,
    ErrorCode,
    Identity,
    Op,
    Perm,
    Remote,
    Status,
    _OP,
    _STATUS,
    addr_int,
    addr_str,
)

_OPS = struct.Struct(_lib.OP_FORMAT)
_CPL = struct.Struct(_lib.COMPLETION_FORMAT)
assert _OPS.size == _lib.OP_SIZE and _CPL.size == _lib.COMPLETION_SIZE

# Cookies of read() and write(): bit 63, a 31-bit generation per call, and
# the op's index within the call (up to 2^32 ops: 16 TB at 4 KB each).
_INTERNAL = 1 << 63
_GEN_SHIFT = 32
_GEN_MASK = (1 << 31) - 1
_IDX_MASK = (1 << _GEN_SHIFT) - 1

# The longest single sleep in wait(): the C call returns at least this
# often, so a signal (Ctrl-C) is handled within it.
_WAIT_SLICE_MS = 200

# Completions taken from the ring per call.
_CPL_BATCH = 256

_tuple_new = tuple.__new__


def _ms(timeout):
    """A timeout in seconds (None: without end) as milliseconds for C."""
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError("onerma: timeout %r: want seconds >= 0, or None" % (timeout,))
    return int(timeout * 1000)


def _key_bytes(key, what="key"):
    key = bytes(key)
    if len(key) != KEY_SIZE:
        raise ValueError("onerma: %s: %d bytes, want %d" % (what, len(key), KEY_SIZE))
    return key


class Portal:
    """A portal on the engine: ``Portal(socket, name)`` dials the engine's
    control socket (None: /run/onerma/rmad.sock), opens a portal named name
    (1..64 of A-Z a-z 0-9 . _ -) and allocates ``slots`` slots, the ops it
    may have in flight at once.

    cmd_cap and cpl_cap are the rings' capacities (0: the engine's),
    service_class a Class the engine's policy must grant, control_timeout
    the bound of each control request in seconds, wait_spins the polls
    wait() spins before it sleeps on the doorbell (0: libonerma's default;
    < 0: none), core the engine core to serve the portal (None: the least
    loaded).

    Use it as a context manager, or call close(): the engine then reclaims
    the portal, its slots and its regions."""

    def __init__(self, socket=None, name="python", *, slots=64, cmd_cap=0, cpl_cap=0,
                 service_class=None, control_timeout=None, wait_spins=0, core=None):
        lib = _lib.load()
        if not 1 <= slots <= 65536:
            raise ValueError("onerma: slots %d: want 1..65536" % slots)
        opts = _lib._Options()
        opts.cmd_cap, opts.cpl_cap = cmd_cap, cpl_cap
        opts.service_class = int(service_class) if service_class is not None else Class.LOW
        opts.timeout_ms = 0 if control_timeout is None else max(1, _ms(control_timeout))
        opts.wait_spins = wait_spins
        if core is not None:
            opts.pin_core, opts.core = 1, core
        h = ctypes.c_void_p()
        err = lib.onerma_dial(socket.encode() if socket else None, name.encode(), ctypes.byref(opts), ctypes.byref(h))
        if err < 0:
            raise error(err, "dial %s" % (socket or "the default socket"))
        self._setup(lib, h, slots, socket, name)

    def _setup(self, lib, h, slots, socket, name):
        self._lib = lib
        self._h = h
        self._socket, self._name = socket, name
        self._regions = []
        self._ready = collections.deque()
        self._staged = False
        self._gen = 0
        self._cookie = 0
        self._scratch = None
        self._op = ctypes.create_string_buffer(_lib.OP_SIZE)
        self._op_ptr = ctypes.addressof(self._op)
        self._post_c = lib.onerma_post
        self._cpl = ctypes.create_string_buffer(_lib.COMPLETION_SIZE * _CPL_BATCH)
        self._cplv = memoryview(self._cpl).cast("B")
        ids = (ctypes.c_uint32 * slots)()
        err = lib.onerma_alloc_slots(h, slots, ids)
        if err < 0:
            lib.onerma_close(h)
            self._h = None
            raise error(err, "alloc_slots %d" % slots)
        # The slots are managed here, not by libonerma's free list
        # (onerma_slot_take/release): a Python list costs a fraction of a
        # ctypes call. Each slot's index names its scratch area.
        self._slots = list(ids)
        self._free = list(reversed(self._slots))
        self._slot_index = {s: i for i, s in enumerate(self._slots)}

    # ---- the portal ----

    def close(self):
        """Close the portal: the engine reclaims it, its slots and its
        regions, and every region is unmapped. Views of a region that are
        still alive read zeros from then on. A second close does nothing."""
        h, self._h = self._h, None
        if h is None:
            return
        regions = [r for r in self._regions if r._h is not None]
        if self._scratch is not None:
            regions.append(self._scratch)
        for r in regions:
            r._detach()
        self._lib.onerma_close(h)
        for r in regions:
            r._park()
        self._regions.clear()
        self._scratch = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    def _handle(self):
        if self._h is None:
            raise OnermaError("onerma: the portal is closed", ErrorCode.INVALID)
        return self._h

    @property
    def closed(self):
        return self._h is None

    @property
    def identity(self):
        """What the engine stamps on this portal's requests: Identity(addr,
        pid, uid, gid, name, tenant). Owners derive K_d for (addr, pid)."""
        i = _lib._Identity()
        self._lib.onerma_portal_identity(self._handle(), ctypes.byref(i))
        return Identity(i.addr, i.pid, i.uid, i.gid, i.name.decode(), i.tenant.decode())

    @property
    def gone(self):
        """True once the portal knows its engine went away."""
        return bool(self._lib.onerma_gone(self._handle()))

    @property
    def service_class(self):
        return Class(self._lib.onerma_portal_class(self._handle()))

    @property
    def core(self):
        return self._lib.onerma_portal_core(self._handle())

    @property
    def max_slots(self):
        return self._lib.onerma_portal_max_slots(self._handle())

    @property
    def hugetlb(self):
        return bool(self._lib.onerma_portal_hugetlb(self._handle()))

    @property
    def doorbell(self):
        """True when wait() sleeps on the engine's completion doorbell."""
        return bool(self._lib.onerma_portal_doorbell(self._handle()))

    @property
    def summary(self):
        """True when flush() rings the core's summary doorbell: the engine
        then reads the command ring only when rung (and in its fallback
        scans). libonerma does the ringing; nothing to do here."""
        return bool(self._lib.onerma_portal_summary(self._handle()))

    @property
    def cmd_cap(self):
        return self._lib.onerma_portal_cmd_cap(self._handle())

    @property
    def cpl_cap(self):
        return self._lib.onerma_portal_cpl_cap(self._handle())

    @property
    def slots(self):
        """How many slots the portal owns."""
        return len(self._slots)

    @property
    def free_slots(self):
        """How many of them have no op in flight."""
        return len(self._free)

    @property
    def outstanding(self):
        """Ops posted whose completion poll() or wait() has not yet
        returned (taken from the ring and not yet returned included)."""
        return len(self._slots) - len(self._free) + len(self._ready)

    def redial(self, timeout=None):
        """A new Portal on the same socket, with the same name, options and
        number of slots, retrying while nothing serves the socket for up to
        timeout seconds (None: without end): after the engine went away and
        came back. The new portal starts with no regions; this one stays
        open (its regions mapped) until closed."""
        out = ctypes.c_void_p()
        err = self._lib.onerma_redial(self._handle(), _ms(timeout), ctypes.byref(out))
        if err < 0:
            raise error(err, "redial")
        p = Portal.__new__(Portal)
        p._setup(self._lib, out, len(self._slots), self._socket, self._name)
        return p

    # ---- regions ----

    def register_region(self, size, perm=Perm.LOCAL_READ | Perm.LOCAL_WRITE, key=None):
        """Register size bytes (1..2^40) of shared memory with permissions
        perm (Perm flags) under a fresh random region key K_r, or under key
        (16 bytes, not all zero). The memory starts zeroed; this process is
        charged for it."""
        h = self._handle()
        out = ctypes.c_void_p()
        if key is None:
            err = self._lib.onerma_register_region(h, size, int(perm), ctypes.byref(out))
        else:
            err = self._lib.onerma_register_region_key(h, size, int(perm), _key_bytes(key, "K_r"), ctypes.byref(out))
        if err < 0:
            raise error(err, "register_region %d bytes" % size)
        r = Region(self, out)
        self._regions.append(r)
        return r

    def register_lookup_region(self, size, layout, perm=Perm.REMOTE_LOOKUP, key=None):
        """Register a region that remote LOOKUPs may scan, its buckets laid
        out as layout (a BucketLayout, or its ten integers) says: as
        register_region, with perm holding Perm.REMOTE_LOOKUP (and any of
        Perm.ALL). The layout must be valid (BucketLayout.check), a bucket
        must fit the region, the region may hold at most
        MAX_LOOKUP_REGION_BYTES, and layout.linked, when not 0, must be a
        region of this portal (the slab the pointers lead into; keep it
        registered while this one is). libonerma refuses what breaks these
        before asking the engine: OnermaError, code INVALID, the rule in
        its detail."""
        h = self._handle()
        lay = layout if isinstance(layout, BucketLayout) else BucketLayout(*layout)
        c = lay._c()
        out = ctypes.c_void_p()
        if key is None:
            err = self._lib.onerma_register_lookup_region(h, size, int(perm), ctypes.byref(c), ctypes.byref(out))
        else:
            err = self._lib.onerma_register_lookup_region_key(h, size, int(perm), ctypes.byref(c),
                                                              _key_bytes(key, "K_r"), ctypes.byref(out))
        if err < 0:
            raise error(err, "register_region %d bytes with a bucket layout" % size)
        r = Region(self, out)
        self._regions.append(r)
        return r

    def deregister_region(self, region):
        """Remove region from the engine (which never touches it again) and
        unmap it. Ops in flight naming it complete with an error status;
        views of it still alive read zeros from then on."""
        ph = self._handle()
        if region._portal is not self or region._h is None:
            raise OnermaError("onerma: deregister: not a region of this portal", ErrorCode.REGION)
        h = region._detach()
        err = self._lib.onerma_deregister_region(ph, h)
        # libonerma frees the region whatever the engine answered.
        region._park()
        self._regions.remove(region)
        if err < 0:
            raise error(err, "deregister_region %#x" % region.id)

    def moderate(self, count, period_us):
        """Moderate the engine's completion doorbell (as ibv_modify_cq): a
        wait() asleep on it is woken once count completions are ready, or
        period_us after the first of them. count 1 with period_us 0 undoes
        it; count > 1 needs a period_us of 1..1000."""
        err = self._lib.onerma_moderate(self._handle(), count, period_us)
        if err < 0:
            raise error(err, "moderate %d, %d us" % (count, period_us))

    def rekey(self, region, kr):
        """Replace region's K_r (the owner's local rekey): once it returns,
        the engine authenticates requests for it only with K_d derived from
        kr, and every K_d handed out before stops working."""
        err = self._lib.onerma_rekey(self._handle(), region._handle(), _key_bytes(kr, "K_r"))
        if err < 0:
            raise error(err, "rekey %#x" % region.id)

    def fetch_key(self, addr, creds, region, op=Op.READ, timeout=None):
        """The K_d of this portal's process for op on region, fetched from
        the region's owner's key exchange at addr ("host:port") with the
        client credentials of the directory creds (`rmactl creds`): a
        keyx.Grant, which read() and write() take as their target."""
        from . import keyx

        return keyx.fetch(addr, creds, self.identity, region, op, timeout=timeout)

    def _scratch_region(self):
        if self._scratch is None:
            self._handle()
            out = ctypes.c_void_p()
            err = self._lib.onerma_register_region(self._h, len(self._slots) * MAX_OP_BYTES,
                                                   int(Perm.LOCAL_READ | Perm.LOCAL_WRITE), ctypes.byref(out))
            if err < 0:
                raise error(err, "register_region (the scratch region)")
            self._scratch = Region(self, out)
        return self._scratch

    # ---- the batch API: post, flush, poll, wait ----

    def _refuse(self, region):
        """Why an op on region cannot be posted: the portal closed, the
        region deregistered, or no free slot."""
        self._handle()
        if region._hv is None:
            return region._gone()
        return OnermaError("onerma: post: no free slot (%d in flight): poll or wait for completions" % len(self._slots),
                           ErrorCode.SLOT)

    def _posted(self, err, typ, slot):
        """After onerma_post: 0, or the slot back and the exception raised."""
        if err < 0:
            self._free.append(slot)
            raise error(err, "post %s" % Op(typ).name, detail=False)
        self._staged = True

    def _next_cookie(self):
        self._cookie = (self._cookie + 1) & (_INTERNAL - 1)
        return self._cookie

    def post_read(self, target, offset, length, into, into_offset=0, cookie=None):
        """Stage a READ of length bytes (1..4096) of target (a Remote or a
        keyx.Grant) at offset into region into at into_offset, which belongs
        to the op until its completion. Returns the op's cookie (cookie, a
        number below 2^63, or one of the portal's). Published by flush(),
        poll() or wait()."""
        if cookie is None:
            cookie = self._next_cookie()
        elif not 0 <= cookie < _INTERNAL:
            raise ValueError("onerma: cookie %r: want 0..2^63-1" % (cookie,))
        h, lh = self._h, into._hv
        if h is None or lh is None or not self._free:
            raise self._refuse(into)
        slot = self._free.pop()
        _OPS.pack_into(self._op, 0, 1, slot, cookie, target.addr, target.region, offset, target.key, lh,
                       into_offset, length, 0, 0)
        self._posted(self._post_c(h, self._op_ptr), 1, slot)
        return cookie

    def post_write(self, target, offset, src, src_offset=0, length=None, cookie=None):
        """Stage a WRITE of length bytes (1..4096; None: the rest of src) of
        region src at src_offset into target at offset."""
        if cookie is None:
            cookie = self._next_cookie()
        elif not 0 <= cookie < _INTERNAL:
            raise ValueError("onerma: cookie %r: want 0..2^63-1" % (cookie,))
        h, lh = self._h, src._hv
        if h is None or lh is None or not self._free:
            raise self._refuse(src)
        if length is None:
            length = src.size - src_offset
        slot = self._free.pop()
        _OPS.pack_into(self._op, 0, 2, slot, cookie, target.addr, target.region, offset, target.key, lh,
                       src_offset, length, 0, 0)
        self._posted(self._post_c(h, self._op_ptr), 2, slot)
        return cookie

    def post_rekey(self, target, key_region, key_offset=0, cookie=None):
        """Stage a remote REKEY: install the 16 bytes of key_region at
        key_offset as target's new K_r (target's K_d for Op.REKEY)."""
        if cookie is None:
            cookie = self._next_cookie()
        elif not 0 <= cookie < _INTERNAL:
            raise ValueError("onerma: cookie %r: want 0..2^63-1" % (cookie,))
        h, lh = self._h, key_region._hv
        if h is None or lh is None or not self._free:
            raise self._refuse(key_region)
        slot = self._free.pop()
        _OPS.pack_into(self._op, 0, 3, slot, cookie, target.addr, target.region, 0, target.key, lh, key_offset,
                       KEY_SIZE, 0, 0)
        self._posted(self._post_c(h, self._op_ptr), 3, slot)
        return cookie

    def post_lookup(self, target, bucket_offset, tag, into, into_offset=0, length=None, bucket=False, cookie=None):
        """Stage a LOOKUP of tag in the bucket at bucket_offset (below 2^32)
        of target (a Remote with the K_d for Op.LOOKUP), answered into
        region into at into_offset: the matched entry there and the bytes
        it points to from BucketLayout.target_offset on. length is the most
        the answer may take (None: the rest of into, at most 4096); bucket:
        on a miss, the answer is the bucket (status REMOTE_NOT_FOUND).
        Returns the op's cookie; the completion's length is the answer's."""
        if cookie is None:
            cookie = self._next_cookie()
        elif not 0 <= cookie < _INTERNAL:
            raise ValueError("onerma: cookie %r: want 0..2^63-1" % (cookie,))
        _lookup_args(bucket_offset, tag)
        h, lh = self._h, into._hv
        if h is None or lh is None or not self._free:
            raise self._refuse(into)
        if length is None:
            length = min(MAX_OP_BYTES, into.size - into_offset)
        slot = self._free.pop()
        _OPS.pack_into(self._op, 0, 4, slot, cookie, target.addr, target.region, bucket_offset, target.key, lh,
                       into_offset, length, FLAG_LOOKUP_BUCKET if bucket else 0, tag)
        self._posted(self._post_c(h, self._op_ptr), 4, slot)
        return cookie

    def flush(self):
        """Publish every staged op with one store (doorbell batching)."""
        if self._staged:
            self._lib.onerma_flush(self._handle())
            self._staged = False

    def _take(self, n, out):
        """Decode n completions from the buffer into out, freeing their
        slots; those of ops read() or write() gave up on are dropped."""
        free, status, ops = self._free, _STATUS, _OP
        for cookie, slot, st, op, _, issue, total, length in _CPL.iter_unpack(self._cplv[:n * 32]):
            free.append(slot)
            if cookie & _INTERNAL:
                continue
            out.append(_tuple_new(Completion, (cookie, slot, status[st], ops[op], issue, total, length)))

    def poll(self, max=_CPL_BATCH):
        """The completions the engine has written, up to max, without
        blocking (publishing staged ops first); [] when none. Raises
        EngineGone once the engine is gone and every op has completed."""
        out = []
        while self._ready and len(out) < max:
            out.append(self._ready.popleft())
        if len(out) == max:
            return out
        h = self._handle()
        if self._staged:
            self._lib.onerma_flush(h)
            self._staged = False
        while True:
            n = self._lib.onerma_poll(h, self._cpl, min(max - len(out), _CPL_BATCH))
            if n < 0:
                if out:
                    return out
                raise error(n, "poll", detail=False)
            self._take(n, out)
            if out or n == 0:
                return out

    def wait(self, timeout=None, max=_CPL_BATCH):
        """At least one completion (up to max), waiting up to timeout
        seconds (None: without end), publishing staged ops first; it spins,
        then sleeps on the engine's completion doorbell. [] at once when no
        op is in flight. Raises Timeout when the time ends, and EngineGone
        once the engine is gone and every op has completed."""
        out = self.poll(max)
        if out or len(self._free) == len(self._slots):
            return out
        remaining = _ms(timeout)
        while True:
            n, remaining = self._wait_slice(remaining, min(max, _CPL_BATCH))
            if n > 0:
                self._take(n, out)
                if out or len(self._free) == len(self._slots):
                    return out
                # else only completions of abandoned ops: wait on

    def _wait_slice(self, deadline, n=_CPL_BATCH):
        """One onerma_wait for up to n completions into the portal's
        buffer, of at most a slice of deadline (ms; -1: none): how many
        came (0 when only the slice ended) and what is left of deadline.
        Raises Timeout when deadline ends, and the error of any other
        failure."""
        ms = _WAIT_SLICE_MS if deadline < 0 else min(deadline, _WAIT_SLICE_MS)
        k = self._lib.onerma_wait(self._h, self._cpl, n, ms)
        if k > 0:
            return k, deadline
        if k != -_errno.ETIMEDOUT or deadline == ms:  # else only the slice ended
            raise error(k, "wait", detail=False)
        return 0, deadline - ms if deadline > 0 else deadline

    # ---- read, write and lookup: post and wait ----

    def lookup(self, target, bucket_offset, tag, *, into=None, into_offset=0, length=None, bucket=False,
               timeout=None):
        """One LOOKUP, waited for: the serving engine scans the bucket at
        bucket_offset of target (a Remote with the K_d for Op.LOOKUP) for
        the first entry whose tag is tag and answers with the entry and,
        from BucketLayout.target_offset on, the bytes it points to. Returns
        the answer (the completion's length bytes): bytes, from the
        portal's scratch region without into; a memoryview of region into
        at into_offset with it, no copy made. length is the most the
        answer may take (None: 4096, or the rest of into).

        The owner may be storing meanwhile: check the entry's tag, pointer
        and length against what came back, as after a READ. Raises NotFound
        when no entry holds the tag (with bucket=True its .bucket holds the
        bucket, when the bucket fits length), StatusError for the other
        statuses (REMOTE_LOOKUP_BOUNDS, REMOTE_LOOKUP_TOO_LARGE, ...),
        Timeout when timeout seconds (None: without end) pass first."""
        _lookup_args(bucket_offset, tag)
        h = self._handle()
        local = self._scratch_region() if into is None else into
        lh = local._handle().value
        if not self._free:
            raise self._refuse(local)
        slot = self._free.pop()
        loff = self._slot_index[slot] * MAX_OP_BYTES if into is None else into_offset
        if length is None:
            length = MAX_OP_BYTES if into is None else min(MAX_OP_BYTES, into.size - into_offset)
        self._gen = (self._gen + 1) & _GEN_MASK
        cookie = _INTERNAL | self._gen << _GEN_SHIFT
        _OPS.pack_into(self._op, 0, 4, slot, cookie, target.addr, target.region, bucket_offset, target.key, lh, loff,
                       length, FLAG_LOOKUP_BUCKET if bucket else 0, tag)
        self._posted(self._lib.onerma_post(h, self._op_ptr), 4, slot)
        self._lib.onerma_flush(h)
        self._staged = False
        c = self._await(cookie, timeout)
        answer = local.view[loff:loff + c.length]
        if c.status != 0:
            e = status_error(c, "LOOKUP of tag %#x in the bucket at %d of region %#x on %s" % (
                tag, bucket_offset, target.region, addr_str(target.addr)))
            if c.status == Status.REMOTE_NOT_FOUND and bucket and c.length:
                e.bucket = bytes(answer)
            raise e
        return bytes(answer) if into is None else answer

    def _await(self, cookie, timeout):
        """Wait for the completion of the op of cookie (one of the
        portal's own) and return it; the caller's completions that come
        meanwhile are kept for its next poll or wait."""
        buf, free, ready = self._cpl, self._free, self._ready
        deadline = _ms(timeout)
        while True:
            k, deadline = self._wait_slice(deadline)
            mine = None
            for i in range(k):
                ck, slot, st, op, _, issue, total, clen = _CPL.unpack_from(buf, i * 32)
                free.append(slot)
                if ck == cookie:
                    mine = Completion(ck, slot, _STATUS[st], _OP[op], issue, total, clen)
                elif not ck & _INTERNAL:
                    ready.append(_tuple_new(Completion, (ck, slot, _STATUS[st], _OP[op], issue, total, clen)))
            if mine is not None:
                return mine

    def read(self, target, offset=0, length=None, *, into=None, into_offset=0, timeout=None):
        """Read length bytes of target (a Remote or a keyx.Grant) at offset,
        and wait for them. Without into, they land in the portal's scratch
        region and come back as bytes; with into (a Region of this portal
        with LOCAL_WRITE), they land there at into_offset (length None: to
        the region's end) and a memoryview of that range comes back, no
        copy made. Any length: ops of up to 4 KB, as many in flight as
        slots are free.

        Raises StatusError (EngineGone for ENGINE_GONE) for the first op
        that failed, once every op of the call has completed; Timeout when
        timeout seconds (None: without end) pass first."""
        if into is None:
            if length is None:
                raise ValueError("onerma: read: give a length, or a region to read into")
            out = bytearray(length)
            self._transfer(1, target, offset, length, None, 0, out, timeout)
            return bytes(out)
        if length is None:
            length = into.size - into_offset
        self._transfer(1, target, offset, length, into, into_offset, None, timeout)
        return into.view[into_offset:into_offset + length]

    def write(self, target, offset, data=None, *, src=None, src_offset=0, length=None, timeout=None):
        """Write to target at offset, and wait: data (any bytes-like object,
        copied through the portal's scratch region), or length bytes of
        region src (LOCAL_READ) at src_offset (length None: to its end).
        Raises as read() does."""
        if (data is None) == (src is None):
            raise ValueError("onerma: write: give data or src, not both")
        if data is not None:
            mv = memoryview(data).cast("B")
            self._transfer(2, target, offset, len(mv), None, 0, mv, timeout)
            return
        if length is None:
            length = src.size - src_offset
        self._transfer(2, target, offset, length, src, src_offset, None, timeout)

    def _transfer(self, typ, target, roff, length, local, loff, data, timeout):
        """Post ops of up to 4 KB for [roff, roff+length) of target as slots
        free up, and wait for every one. local None: through the scratch
        region, each op in the 4 KB area of its slot, with data the bytes
        to write from or read into."""
        if length <= 0:
            if length == 0:
                return
            raise ValueError("onerma: length %d" % length)
        h = self._handle()
        lib = self._lib
        if local is None:
            scratch = self._scratch_region()
            lh, sview = scratch._h.value, scratch.view
        else:
            lh, sview = local._handle().value, None
        self._gen = (self._gen + 1) & _GEN_MASK
        base = _INTERNAL | self._gen << _GEN_SHIFT
        chunks = (length + MAX_OP_BYTES - 1) // MAX_OP_BYTES
        deadline = _ms(timeout)
        posted = done = 0
        first = None
        free, ready, index, buf = self._free, self._ready, self._slot_index, self._cpl
        while done < chunks:
            # Post what free slots allow (nothing more once an op failed).
            while posted < chunks and free and first is None:
                slot = free.pop()
                off = posted * MAX_OP_BYTES
                n = min(MAX_OP_BYTES, length - off)
                if sview is None:
                    lo = loff + off
                else:
                    lo = index[slot] * MAX_OP_BYTES
                    if typ == 2:
                        sview[lo:lo + n] = data[off:off + n]
                _OPS.pack_into(self._op, 0, typ, slot, base | posted, target.addr, target.region, roff + off,
                               target.key, lh, lo, n, 0, 0)
                err = lib.onerma_post(h, self._op_ptr)
                if err < 0:
                    free.append(slot)
                    if err == -ErrorCode.RING_FULL and posted > done:
                        break  # flush, wait, and post the rest as the engine drains the ring
                    if posted == done:
                        raise error(err, "post %s" % Op(typ).name, detail=False)
                    first = error(err, "post %s" % Op(typ).name, detail=False)
                    break
                posted += 1
                self._staged = True
            if done == posted and first is not None:
                break  # nothing of this call in flight, and a failure to post
            # With no slot free, the caller's ops hold them all: waiting
            # takes their completions (kept for its next poll or wait).
            if self._staged:
                lib.onerma_flush(h)
                self._staged = False
            k, deadline = self._wait_slice(deadline)
            for i in range(k):
                cookie, slot, st, op, _, issue, total, clen = _CPL.unpack_from(buf, i * 32)
                free.append(slot)
                if cookie & ~_IDX_MASK != base:
                    if not cookie & _INTERNAL:  # the caller's: for its next poll or wait
                        ready.append(_tuple_new(Completion, (cookie, slot, _STATUS[st], _OP[op], issue,
                                                             total, clen)))
                    continue  # an op of an earlier call that gave up on it
                done += 1
                if st != 0:
                    if first is None or (isinstance(first, Completion) and st == 24 and first.status != 24):
                        first = Completion(cookie, slot, _STATUS[st], _OP[op], issue, total, clen)
                elif sview is not None and typ == 1:
                    off = (cookie & _IDX_MASK) * MAX_OP_BYTES
                    lo = index[slot] * MAX_OP_BYTES
                    data[off:off + clen] = sview[lo:lo + clen]
        if first is not None:
            if isinstance(first, Completion):
                raise status_error(first, "%s of %d bytes at %d of region %#x on %s" % (
                    Op(typ).name, length, roff, target.region, addr_str(target.addr)))
            raise first
        if done < chunks:
            raise OnermaError("onerma: %s: %d of %d ops done" % (Op(typ).name, done, chunks))


class Region:
    """A region registered through a Portal (struct onerma_region): size
    bytes of shared memory the engine reads and writes, under its id.

    view is a writable memoryview of the memory, numpy() a numpy array over
    it (no copy; numpy needed); np.asarray(region) works too. They stay
    valid while the region is registered; once it is deregistered or its
    portal closed, they read zeros."""

    def __init__(self, portal, h):
        lib = portal._lib
        self._portal, self._lib, self._h, self._hv = portal, lib, h, h.value
        self.id = lib.onerma_region_id(h)
        self.size = lib.onerma_region_size(h)
        self.perm = Perm(lib.onerma_region_perm(h))
        self.hugetlb = bool(lib.onerma_region_hugetlb(h))
        lay = _lib._BucketLayout()
        # The bucket layout it was registered with (register_lookup_region), or None.
        self.layout = BucketLayout(*(getattr(lay, f) for f, _ in lay._fields_)) if lib.onerma_region_layout(
            h, ctypes.byref(lay)) else None
        self._addr = lib.onerma_region_addr(h)
        self._arr = (ctypes.c_ubyte * self.size).from_address(self._addr)

    def _handle(self):
        if self._h is None:
            raise OnermaError("onerma: the region is deregistered", ErrorCode.REGION)
        return self._h

    def _detach(self):
        h, self._h, self._hv = self._h, None, None
        return h

    def _gone(self):
        return OnermaError("onerma: the region is deregistered", ErrorCode.REGION)

    def _park(self):
        """After libonerma unmapped the region: when views of it are still
        alive (they hold the ctypes array), map anonymous zero pages where
        it was, so they read zeros rather than fault. MAP_FIXED_NOREPLACE:
        a mapping made there since by another thread is left alone."""
        if self._arr is None:
            return
        views = sys.getrefcount(self._arr) > 2  # self._arr and the argument
        if views:
            _park(self._addr, self.size)
        self._arr = None

    @property
    def portal(self):
        return self._portal

    @property
    def view(self):
        """A writable memoryview (format "B") of the region's memory."""
        if self._arr is None:
            raise OnermaError("onerma: the region is deregistered", ErrorCode.REGION)
        return memoryview(self._arr).cast("B")

    def numpy(self, dtype="uint8", count=-1, offset=0):
        """A numpy array over the region's memory (numpy.frombuffer: no copy;
        dtype, count and offset as frombuffer takes them)."""
        import numpy

        return numpy.frombuffer(self.view, dtype=dtype, count=count, offset=offset)

    def __array__(self, dtype=None, copy=None):
        import numpy

        a = numpy.frombuffer(self.view, dtype=numpy.uint8)
        return a if dtype is None else a.astype(dtype)

    def __len__(self):
        return self.size

    def key(self):
        """The region's current K_r (secret: hand out K_d only)."""
        kr = ctypes.create_string_buffer(KEY_SIZE)
        self._lib.onerma_region_key(self._handle(), kr)
        return kr.raw

    def derive_kd(self, initiator, identity, op):
        """The K_d of the process with engine-stamped identity `identity`,
        initiating op through the engine at initiator (an address), under
        the region's current K_r: what its owner hands that reader."""
        kd = ctypes.create_string_buffer(KEY_SIZE)
        err = self._lib.onerma_region_derive_kd(self._handle(), addr_int(initiator), identity, int(op), kd)
        if err < 0:
            raise error(err, "derive_kd", detail=False)
        return kd.raw

    def remote_for(self, reader, op=Op.READ):
        """The Remote a reader (an Identity, as its Portal.identity says) puts
        in its ops on this region: this engine's address, the region's id
        and the reader's K_d for op. The owner's side of a key exchange."""
        owner = self._portal.identity
        return Remote(owner.addr, self.id, self.derive_kd(reader.addr, reader.pid, op), self.size)

    def deregister(self):
        """Portal.deregister_region(self)."""
        self._portal.deregister_region(self)

    def __repr__(self):
        lay = "" if self.layout is None else ", layout=%r" % (self.layout,)
        return "Region(id=%#x, size=%d, perm=%s%s)" % (self.id, self.size, self.perm, lay)


def _lookup_args(bucket_offset, tag):
    """ValueError for a LOOKUP's bucket offset or tag that no u64 holds
    (libonerma refuses an offset of 2^32 or more: ErrorCode.OP)."""
    if not 0 <= bucket_offset <= 0xFFFFFFFFFFFFFFFF:
        raise ValueError("onerma: lookup: bucket offset %r, want 0..2^32-1" % (bucket_offset,))
    if not 0 <= tag <= 0xFFFFFFFFFFFFFFFF:
        raise ValueError("onerma: lookup: tag %r, want 0..2^64-1" % (tag,))


def derive_kd(kr, initiator, identity, op):
    """K_d = AES-128_{K_r}(initiator address || identity || op || 0^56): the
    key the process of engine-stamped identity `identity` initiating op
    through the engine at initiator puts in its ops on the region of K_r."""
    lib = _lib.load()
    kd = ctypes.create_string_buffer(KEY_SIZE)
    err = lib.onerma_derive_kd(_key_bytes(kr, "K_r"), addr_int(initiator), identity, int(op), kd)
    if err < 0:
        raise error(err, "derive_kd", detail=False)
    return kd.raw


_libc = None


def _park(addr, size):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    prot_rw, map_private, map_anonymous, map_fixed_noreplace = 0x3, 0x02, 0x20, 0x100000
    page = 4096
    n = (size + page - 1) // page * page
    _libc.mmap(addr, n, prot_rw, map_private | map_anonymous | map_fixed_noreplace, -1, 0)
