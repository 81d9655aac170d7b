"""The package against a real engine: one loopback engine (its READs and
WRITEs of its own regions go out on a net_ring port and come back), every
byte checked; statuses, keys, regions, the batch API; and an engine
SIGKILLed under a Python reader with ops in flight."""

import os
import random
import socket
import struct
import threading
import time

import pytest

import bed
import onerma
from conftest import engines
from onerma import ErrorCode, Op, Perm, Status

OWNER_BYTES = 256 << 10


@pytest.fixture
def owner(portal):
    """A region of the portal that remote READs and WRITEs may use, filled
    with the e2e pattern."""
    r = portal.register_region(OWNER_BYTES, Perm.REMOTE_READ | Perm.REMOTE_WRITE | Perm.LOCAL_READ)
    r.view[:] = bed.patterned(0, OWNER_BYTES)
    return r


def test_identity_and_properties(portal, loop):
    i = portal.identity
    assert i.address == loop.ip and i.name == "pytest" and i.pid != 0
    assert portal.slots == portal.free_slots == 16 and portal.outstanding == 0
    assert portal.cmd_cap >= 2 and portal.cpl_cap >= 2 and portal.max_slots >= 16
    assert portal.service_class is onerma.Class.LOW and not portal.gone
    assert portal.summary  # flush rings the core's summary doorbell (libonerma does it)


def test_reads(portal, owner):
    """READs of 1 B to 4 KB, and of any length (ops of 4 KB, as many in
    flight as slots are free), checked byte for byte: as bytes, and into a
    region of the caller with no copy."""
    t = owner.remote_for(portal.identity, Op.READ)
    sink = portal.register_region(128 << 10, Perm.LOCAL_WRITE)
    for k, n in enumerate([1, 63, 64, 65, 1000, 1408, 1409, 4095, 4096, 4097, 10000, (64 << 10) + 7]):
        off = (k * 7919 + 13) % (OWNER_BYTES - n)
        assert portal.read(t, off, n) == bed.patterned(off, n), n
        lo = k * 31 + 1
        v = portal.read(t, off, n, into=sink, into_offset=lo)
        assert isinstance(v, memoryview) and v.tobytes() == bed.patterned(off, n)
        assert sink.view[lo:lo + n] == bed.patterned(off, n)
    # length None: to the end of the sink.
    assert portal.read(t, 0, into=sink).tobytes() == bed.patterned(0, 128 << 10)


def test_writes(portal, owner):
    """WRITEs from bytes and from a region, seen in the owner's memory and
    read back."""
    tw = owner.remote_for(portal.identity, Op.WRITE)
    tr = owner.remote_for(portal.identity, Op.READ)
    rnd = random.Random(1)
    for n in (1, 64, 1409, 4096, 9000):
        off = rnd.randrange(OWNER_BYTES - n)
        data = rnd.randbytes(n)
        portal.write(tw, off, data)
        assert owner.view[off:off + n] == data
        assert portal.read(tr, off, n) == data
    src = portal.register_region(8192, Perm.LOCAL_READ)
    src.view[:] = rnd.randbytes(8192)
    portal.write(tw, 100000, src=src, src_offset=100, length=5000)
    assert owner.view[100000:105000] == src.view[100:5100]
    portal.write(tw, 0, src=src)
    assert owner.view[:8192] == src.view[:]
    portal.write(tw, 5, memoryview(b"abc"))
    assert owner.view[5:8] == b"abc"


def test_batch(portal, owner):
    """post_read many, flush once, completions by poll and wait: each
    cookie exactly once, its data where its op put it."""
    t = owner.remote_for(portal.identity, Op.READ)
    sink = portal.register_region(16 * 4096, Perm.LOCAL_WRITE)
    seen = {}
    for round_ in range(4):
        cookies = {}
        for k in range(portal.slots):
            c = portal.post_read(t, (round_ * 16 + k) * 1000, 4096, sink, k * 4096, cookie=round_ * 100 + k)
            cookies[c] = k
        assert portal.free_slots == 0
        with pytest.raises(onerma.OnermaError) as ei:
            portal.post_read(t, 0, 64, sink)
        assert ei.value.code is ErrorCode.SLOT
        got = portal.poll()  # publishes the staged ops; maybe nothing yet
        while len(got) < len(cookies):
            got += portal.wait(timeout=10)
        for c in got:
            assert c.cookie in cookies and c.cookie not in seen
            seen[c.cookie] = c
            c.check()
            k = cookies[c.cookie]
            off = (round_ * 16 + k) * 1000
            assert c.op is Op.READ and c.length == 4096 and c.issue_delay_ns <= c.total_delay_ns
            assert sink.view[k * 4096:(k + 1) * 4096] == bed.patterned(off, 4096)
    assert portal.wait(timeout=0) == [] and portal.poll() == []
    # Cookies of the portal's own when none is given.
    a, b = portal.post_read(t, 0, 8, sink), portal.post_read(t, 8, 8, sink, 8)
    assert a != b
    got = []
    while len(got) < 2:
        got += portal.wait(timeout=10)
    assert sorted(c.cookie for c in got) == sorted([a, b])


def test_moderate(portal, owner):
    """A moderated doorbell: waits still return every completion; the
    engine counts the rings it held back; bad arguments are refused by
    libonerma, a count over the completion ring's by the engine."""
    t = owner.remote_for(portal.identity, Op.READ)
    sink = portal.register_region(16 * 4096, Perm.LOCAL_WRITE)
    for count, period, code in ((0, 50, ErrorCode.INVALID), (4, 0, ErrorCode.INVALID), (4, 1001, ErrorCode.INVALID),
                                (portal.cpl_cap + 1, 50, ErrorCode.BAD_REQUEST)):
        with pytest.raises(onerma.OnermaError) as ei:
            portal.moderate(count, period)
        assert ei.value.code is code, (count, period)
    portal.moderate(8, 200)
    cookies = {portal.post_read(t, k * 4096, 4096, sink, k * 4096) for k in range(portal.slots)}
    got = portal.poll()
    while len(got) < len(cookies):
        got += portal.wait(timeout=10)
    assert sorted(c.cookie for c in got) == sorted(cookies)
    for c in got:
        c.check()
    portal.moderate(1, 0)


def test_read_while_batch_holds_every_slot(portal, owner):
    """A read() while the caller's ops hold every slot waits for them; their
    completions are kept for the caller's next poll or wait."""
    t = owner.remote_for(portal.identity, Op.READ)
    sink = portal.register_region(16 * 64, Perm.LOCAL_WRITE)
    for k in range(portal.slots):
        portal.post_read(t, k * 64, 64, sink, k * 64, cookie=1000 + k)
    assert portal.free_slots == 0
    assert portal.read(t, 4096, 5000) == bed.patterned(4096, 5000)
    got = []
    while len(got) < 16:
        got += [c.check() for c in portal.wait(timeout=10)]
    assert sorted(c.cookie for c in got) == list(range(1000, 1016))
    assert sink.view[:] == bed.patterned(0, 16 * 64)


def test_batch_writes_and_explicit_flush(portal, owner):
    tw = owner.remote_for(portal.identity, Op.WRITE)
    src = portal.register_region(4 * 4096, Perm.LOCAL_READ)
    src.view[:] = os.urandom(4 * 4096)
    for k in range(4):
        portal.post_write(tw, 200000 + k * 4096, src, k * 4096, 4096, cookie=k)
    portal.flush()
    done = []
    while len(done) < 4:
        done += [c.check() for c in portal.wait(timeout=10)]
    assert owner.view[200000:200000 + 4 * 4096] == src.view[:]


def test_statuses(portal, owner):
    """Each refusal with its status, as an exception that carries it."""
    me = portal.identity
    t = owner.remote_for(me, Op.READ)

    def status_of(fn):
        with pytest.raises(onerma.StatusError) as ei:
            fn()
        assert not isinstance(ei.value, onerma.EngineGone)
        return ei.value.status

    wrong = onerma.Remote(t.addr, t.region, os.urandom(16))
    assert status_of(lambda: portal.read(wrong, 0, 64)) is Status.REMOTE_AUTHENTICATION_FAILURE
    tw = owner.remote_for(me, Op.WRITE)
    assert status_of(lambda: portal.read(tw, 0, 64)) is Status.REMOTE_AUTHENTICATION_FAILURE  # a WRITE K_d
    assert status_of(lambda: portal.write(t, 0, b"x")) is Status.REMOTE_AUTHENTICATION_FAILURE  # a READ K_d
    assert status_of(lambda: portal.read(t, OWNER_BYTES - 10, 64)) is Status.REMOTE_BOUNDS
    # A sink the engine may not write.
    ro = portal.register_region(4096, Perm.LOCAL_READ)
    assert status_of(lambda: portal.read(t, 0, 64, into=ro)) is Status.LOCAL_PERMISSION
    # A region remote WRITEs may not use.
    rd_only = portal.register_region(4096, Perm.REMOTE_READ)
    t2 = rd_only.remote_for(me, Op.WRITE)
    assert status_of(lambda: portal.write(t2, 0, b"x")) is Status.REMOTE_PERMISSION
    # The library refuses what it knows is wrong before the engine sees it.
    sink = portal.register_region(4096, Perm.LOCAL_WRITE)
    for length, code in [(0, ErrorCode.LENGTH), (4097, ErrorCode.LENGTH), (64, ErrorCode.BOUNDS)]:
        with pytest.raises(onerma.OnermaError) as ei:
            portal.post_read(t, 0, length, sink, 4096 - 32)
        assert ei.value.code is code
    assert portal.free_slots == portal.slots
    # The message says what failed.
    with pytest.raises(onerma.StatusError) as ei:
        portal.read(wrong, 128, 64)
    assert "READ of 64 bytes at 128 of region %#x on %s completed REMOTE_AUTHENTICATION_FAILURE" % (
        t.region, t.owner) in str(ei.value)


SLAB_BYTES = 64 << 10


def put_entry(index, off, tag, ptr, n):
    """An entry of the layout BucketLayout(256, 32, 0, 8, 8, 8, 0, 16, 4) at
    off of index: tag u64, pointer u64, length u32."""
    index.view[off:off + 20] = struct.pack("<QQI", tag, ptr, n)


def test_lookup(portal):
    """LOOKUPs through the loopback engine, every byte checked: a hit
    answers with the entry and the bytes it points to (into the linked
    slab, and into the index itself, a pointer in bytes and one in units
    of 2^ptr_shift bytes), a miss raises NotFound (with the
    bucket when asked), a torn entry REMOTE_LOOKUP_BOUNDS, a short sink
    REMOTE_LOOKUP_TOO_LARGE; the batch API; and what the library refuses
    before the engine sees it."""
    me = portal.identity
    slab = portal.register_region(SLAB_BYTES, Perm.REMOTE_READ)
    slab.view[:] = bed.patterned(0, SLAB_BYTES)
    lay = onerma.BucketLayout(256, 32, 0, 8, 8, 8, 0, 16, 4, linked=slab)
    index = portal.register_lookup_region(16 * 256, lay)
    assert index.layout == lay and lay.linked == slab.id and index.perm == Perm.REMOTE_LOOKUP
    assert slab.layout is None
    b3 = 3 * 256
    put_entry(index, b3 + 5 * 32, 0x1122334455667788, 1000, 700)
    put_entry(index, b3 + 6 * 32, 0x66, SLAB_BYTES - 100, 101)  # past the slab's end
    put_entry(index, b3 + 7 * 32, 0x77, 0, 0)  # an empty target
    t = index.remote_for(me, Op.LOOKUP)

    a = portal.lookup(t, b3, 0x1122334455667788)
    assert len(a) == lay.target_offset + 700
    assert a[:32] == index.view[b3 + 160:b3 + 192] and a[64:] == bed.patterned(1000, 700)
    assert portal.lookup(t, b3, 0x77) == index.view[b3 + 224:b3 + 256]
    sink = portal.register_region(8192, Perm.LOCAL_WRITE)
    sink.view[128 + 32:128 + 64] = b"\xee" * 32
    v = portal.lookup(t, b3, 0x1122334455667788, into=sink, into_offset=128)
    assert isinstance(v, memoryview) and len(v) == len(a) and v[:32] == a[:32] and v[64:] == a[64:]
    assert sink.view[128 + 32:128 + 64] == bytes(32)  # the bytes between: the entry shares the target's frame

    with pytest.raises(onerma.NotFound) as ei:
        portal.lookup(t, b3, 0x42)
    assert ei.value.bucket is None and ei.value.status is Status.REMOTE_NOT_FOUND
    assert "LOOKUP of tag 0x42 in the bucket at 768 of region %#x" % index.id in str(ei.value)
    with pytest.raises(onerma.NotFound) as ei:
        portal.lookup(t, b3, 0x42, bucket=True)
    assert ei.value.bucket == index.view[b3:b3 + 256]
    with pytest.raises(onerma.NotFound) as ei:
        portal.lookup(t, b3, 0x42, bucket=True, length=255)  # the bucket does not fit
    assert ei.value.bucket is None

    def status_of(fn):
        with pytest.raises(onerma.StatusError) as ei:
            fn()
        return ei.value.status

    assert status_of(lambda: portal.lookup(t, b3, 0x66)) is Status.REMOTE_LOOKUP_BOUNDS
    assert status_of(lambda: portal.lookup(t, b3, 0x1122334455667788, length=763)) is Status.REMOTE_LOOKUP_TOO_LARGE
    assert status_of(lambda: portal.lookup(t, 16 * 256 - 255, 1)) is Status.REMOTE_BOUNDS
    tr = index.remote_for(me, Op.READ)
    assert status_of(lambda: portal.lookup(tr, b3, 1)) is Status.REMOTE_AUTHENTICATION_FAILURE  # a READ K_d
    ts = slab.remote_for(me, Op.LOOKUP)
    assert status_of(lambda: portal.lookup(ts, 0, 1)) is Status.REMOTE_PERMISSION  # no bucket layout

    # Without a linked region, pointers lead into the index itself; here
    # they count units of 64 bytes (ptr_shift 6), the engine's bounds
    # checked on the bytes they name.
    own = portal.register_lookup_region(8192, onerma.BucketLayout(64, 16, 0, 4, 4, 4, 6, 8, 2),
                                        Perm.REMOTE_LOOKUP | Perm.REMOTE_READ)
    assert own.layout.ptr_shift == 6 and own.layout.len_off == 8 and own.layout.linked == 0
    to = own.remote_for(me, Op.LOOKUP)
    own.view[4096:4096 + 300] = bed.patterned(7, 300)
    own.view[64 + 16:64 + 26] = struct.pack("<IIH", 0xdead, 4096 >> 6, 300)
    a = portal.lookup(to, 64, 0xdead)
    assert a[:16] == own.view[80:96] and a[64:] == bed.patterned(7, 300)
    own.view[8128:8192] = bed.patterned(9, 64)
    own.view[64 + 32:64 + 42] = struct.pack("<IIH", 0xbeef, (8192 >> 6) - 1, 64)  # the region's last 64 bytes
    a = portal.lookup(to, 64, 0xbeef)
    assert len(a) == 128 and a[:16] == own.view[96:112] and a[64:] == bed.patterned(9, 64)
    own.view[64 + 32:64 + 42] = struct.pack("<IIH", 0xbeef, 8192 >> 6, 1)  # in bytes, 128 would be inside
    assert status_of(lambda: portal.lookup(to, 64, 0xbeef)) is Status.REMOTE_LOOKUP_BOUNDS

    # The batch API: LOOKUPs and a READ in one flush.
    hit = portal.post_lookup(t, b3, 0x1122334455667788, sink, 0)
    empty = portal.post_lookup(t, b3, 0x77, sink, 1024)
    miss = portal.post_lookup(t, b3, 0x42, sink, 2048, bucket=True)
    read = portal.post_read(slab.remote_for(me, Op.READ), 0, 64, sink, 4096)
    done = []
    while len(done) < 4:
        done += portal.wait(timeout=10)
    by = {c.cookie: c for c in done}
    assert by[read].ok and by[read].op is Op.READ and sink.view[4096:4096 + 64] == bed.patterned(0, 64)
    for ck, st, n in [(hit, Status.OK, 764), (empty, Status.OK, 32), (miss, Status.REMOTE_NOT_FOUND, 256)]:
        assert by[ck].op is Op.LOOKUP and by[ck].status is st and by[ck].length == n
    assert sink.view[0:32] == index.view[b3 + 160:b3 + 192] and sink.view[64:764] == bed.patterned(1000, 700)
    assert sink.view[1024:1024 + 32] == index.view[b3 + 224:b3 + 256]
    assert sink.view[2048:2048 + 256] == index.view[b3:b3 + 256]

    # Refused by the library: nothing posted, no slot taken.
    with pytest.raises(onerma.OnermaError) as ei:
        portal.post_lookup(t, 1 << 32, 1, sink)
    assert ei.value.code is ErrorCode.OP
    with pytest.raises(onerma.OnermaError) as ei:
        portal.post_lookup(t, 0, 1, sink, 8192 - 63, length=64)
    assert ei.value.code is ErrorCode.BOUNDS
    with pytest.raises(ValueError):
        portal.post_lookup(t, 0, 1 << 64, sink)
    with pytest.raises(ValueError):
        portal.lookup(t, -1, 1)
    for fn, detail in [
        (lambda: portal.register_region(4096, Perm.REMOTE_LOOKUP), "register_lookup_region"),
        (lambda: portal.register_lookup_region(4096, lay, Perm.REMOTE_READ), "want ONERMA_PERM_REMOTE_LOOKUP"),
        (lambda: portal.register_lookup_region(4096, lay._replace(tag_width=3)), "tag width 3"),
        (lambda: portal.register_lookup_region(4096, lay._replace(ptr_shift=33)), "pointer shift above 32: 33"),
        (lambda: portal.register_lookup_region(255, lay), "size 255, want 256..4294967295"),
        (lambda: portal.register_lookup_region(4096, lay._replace(linked=0x7fffffff)), "is not a region of this portal"),
    ]:
        with pytest.raises(onerma.OnermaError) as ei:
            fn()
        assert ei.value.code is ErrorCode.INVALID and detail in ei.value.detail
    assert portal.free_slots == portal.slots


def test_keys_and_rekey(portal, owner):
    """The K_d Region.derive_kd gives is onerma.derive_kd under its K_r; a
    rekey makes every K_d handed out fail at once; a remote REKEY installs
    the key it carries."""
    me = portal.identity
    kr = owner.key()
    assert owner.derive_kd(me.addr, me.pid, Op.READ) == onerma.derive_kd(kr, me.address, me.pid, Op.READ)
    t = owner.remote_for(me, Op.READ)
    assert portal.read(t, 0, 64) == bed.patterned(0, 64)
    new = os.urandom(16)
    portal.rekey(owner, new)
    assert owner.key() == new
    with pytest.raises(onerma.StatusError) as ei:
        portal.read(t, 0, 64)
    assert ei.value.status is Status.REMOTE_AUTHENTICATION_FAILURE
    assert portal.read(owner.remote_for(me, Op.READ), 0, 64) == bed.patterned(0, 64)
    # A remote REKEY of a region that allows it.
    r = portal.register_region(4096, Perm.REMOTE_READ | Perm.REMOTE_REKEY, key=bytes(range(1, 17)))
    assert r.key() == bytes(range(1, 17))
    keysrc = portal.register_region(4096, Perm.LOCAL_READ)
    k2 = os.urandom(16)
    keysrc.view[32:48] = k2
    portal.post_rekey(r.remote_for(me, Op.REKEY), keysrc, 32, cookie=9)
    (c,) = portal.wait(timeout=10)
    c.check()
    assert c.cookie == 9 and c.op is Op.REKEY
    # The engine authenticates under the key installed (the library's copy
    # of K_r, Region.key, is the owner's local one).
    r.view[:3] = b"new"
    old = onerma.Remote(me.addr, r.id, onerma.derive_kd(bytes(range(1, 17)), me.addr, me.pid, Op.READ))
    with pytest.raises(onerma.StatusError):
        portal.read(old, 0, 3)
    assert portal.read(onerma.Remote(me.addr, r.id, onerma.derive_kd(k2, me.addr, me.pid, Op.READ)), 0, 3) == b"new"
    with pytest.raises(ValueError):
        portal.register_region(4096, Perm.REMOTE_READ, key=bytes(8))
    with pytest.raises(onerma.OnermaError) as ei:
        portal.register_region(4096, Perm.REMOTE_READ, key=bytes(16))
    assert ei.value.code is ErrorCode.ZERO_KEY


def test_deregister_and_stale_views(portal, owner):
    """A deregistered region's id answers REMOTE_REGION; views of it that
    outlive it read zeros rather than fault."""
    me = portal.identity
    r = portal.register_region(8192, Perm.REMOTE_READ)
    r.view[:5] = b"hello"
    keep = r.view
    t = r.remote_for(me, Op.READ)
    assert portal.read(t, 0, 5) == b"hello"
    r.deregister()
    with pytest.raises(onerma.StatusError) as ei:
        portal.read(t, 0, 5)
    assert ei.value.status is Status.REMOTE_REGION
    assert keep[:5] == bytes(5)
    keep[0] = 1  # written nowhere
    with pytest.raises(onerma.OnermaError):
        r.view
    with pytest.raises(onerma.OnermaError):
        r.deregister()


def test_numpy(portal, owner):
    np = pytest.importorskip("numpy")
    a = owner.numpy()
    assert a.dtype == np.uint8 and a.shape == (OWNER_BYTES,)
    assert np.array_equal(a[:4096], np.frombuffer(bed.patterned(0, 4096), dtype=np.uint8))
    words = owner.numpy(dtype=np.uint32, count=4, offset=64)
    words[:] = [1, 2, 3, 4]  # no copy: the engine serves what numpy wrote
    t = owner.remote_for(portal.identity, Op.READ)
    assert np.frombuffer(portal.read(t, 64, 16), dtype=np.uint32).tolist() == [1, 2, 3, 4]
    sink = portal.register_region(1 << 16, Perm.LOCAL_WRITE)
    portal.read(t, 0, 1 << 16, into=sink)
    assert np.array_equal(np.asarray(sink), a[:1 << 16])
    assert np.asarray(sink).base is not None  # a view, not a copy


def test_wait_timeout(lib, tmp_path):
    """A wait that ends before the completion raises Timeout; the op stays
    in flight and its completion comes later; read() drops the completion
    of an op it gave up on."""
    engines()
    e = bed.loopback(str(tmp_path), "py-tmo-%d" % (os.getpid() % 10000), "10.97.3.1",
                     extra=["-resolve-timeout", "1s"]).start()
    try:
        with onerma.Portal(e.socket, "pytest-timeout", slots=4) as p:
            r = p.register_region(4096, Perm.REMOTE_READ | Perm.LOCAL_WRITE)
            hang = onerma.Remote("10.97.3.99", r.id, bytes(16))  # nobody answers its ARP
            c = p.post_read(hang, 0, 64, r, cookie=77)
            with pytest.raises(onerma.Timeout) as ei:
                p.wait(timeout=0.05)
            assert isinstance(ei.value, TimeoutError) and p.outstanding == 1
            (cpl,) = p.wait(timeout=10)
            assert cpl.cookie == c and cpl.status is Status.UNREACHABLE
            with pytest.raises(onerma.Timeout):
                p.read(hang, 0, 64, timeout=0.05)
            assert p.free_slots == 3
            me = r.remote_for(p.identity, Op.READ)
            deadline = time.monotonic() + 10
            while p.free_slots < 4 and time.monotonic() < deadline:
                assert p.read(me, 0, 8) == bytes(8)  # reaps the abandoned op's completion on the way
                assert p.poll() == []
            assert p.free_slots == 4 and p.outstanding == 0
    finally:
        e.stop()


def watch_close(path):
    """A control connection of our own to the engine, and the monotonic
    time (ns) at which the kernel closes it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    out = []

    def run():
        try:
            s.recv(64)
        finally:
            out.append(time.monotonic_ns())

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return s, th, out


# portal's bound on reporting a dead engine (e2e TestEngineKilledAppNotified):
# 100 ms after its control connection closed.
GONE_BOUND_NS = 100_000_000


def test_engine_killed(lib, tmp_path):
    """The engine SIGKILLed under a Python reader with ops in flight (READs
    of an address nobody answers, waiting for ARP): every op completes
    ENGINE_GONE, its check() raising EngineGone, within the bound of the
    control connection closing; from then on every call raises EngineGone;
    a read() waiting when the engine dies raises it too; once the engine is
    back, redial reads again."""
    engines()
    e = bed.loopback(str(tmp_path), "py-kill-%d" % (os.getpid() % 10000), "10.97.4.1",
                     extra=["-resolve-timeout", "10s"]).start()
    try:
        p = onerma.Portal(e.socket, "pytest-killed", slots=16)
        r = p.register_region(64 << 10, Perm.REMOTE_READ | Perm.LOCAL_WRITE)
        me = r.remote_for(p.identity, Op.READ)
        assert p.read(me, 0, 4096) == bytes(4096)
        hang = onerma.Remote("10.97.4.99", r.id, me.key)
        n = 8
        for k in range(n):
            p.post_read(hang, 0, 64, r, k * 64, cookie=k)
        p.flush()
        raw, th, closed = watch_close(e.socket)
        killer = threading.Timer(0.02, e.kill)  # the reader asleep on its doorbell
        killer.start()
        seen, gone_at = set(), []
        while len(seen) < n:
            for c in p.wait(timeout=15):
                with pytest.raises(onerma.EngineGone) as ei:
                    c.check()
                assert ei.value.status is Status.ENGINE_GONE and ei.value.completion is c
                assert c.cookie not in seen and 0 <= c.cookie < n
                seen.add(c.cookie)
                gone_at.append(time.monotonic_ns())
        killer.join()
        th.join(5)
        raw.close()
        assert closed, "the engine's control connection did not close"
        late = max(gone_at) - closed[0]
        assert late <= GONE_BOUND_NS, "EngineGone %.1f ms after the control connection closed" % (late / 1e6)
        assert p.gone
        for call in (p.poll, lambda: p.wait(timeout=1), lambda: p.post_read(me, 0, 64, r),
                     lambda: p.read(me, 0, 64)):
            with pytest.raises(onerma.EngineGone):
                call()
        assert p.free_slots == p.slots

        # A read() in progress when the engine dies: its 16 ops end
        # ENGINE_GONE and it raises EngineGone once, within the bound.
        e.start()
        p2 = p.redial(timeout=10)
        p.close()
        r2 = p2.register_region(64 << 10, Perm.REMOTE_READ | Perm.LOCAL_WRITE)
        me2 = r2.remote_for(p2.identity, Op.READ)
        assert p2.read(me2, 0, 64) == bytes(64)
        raw, th, closed = watch_close(e.socket)
        killer = threading.Timer(0.05, e.kill)
        killer.start()
        with pytest.raises(onerma.EngineGone):
            p2.read(onerma.Remote("10.97.4.99", r2.id, me2.key), 0, 64 << 10, into=r2)
        raised = time.monotonic_ns()
        killer.join()
        th.join(5)
        raw.close()
        assert raised - closed[0] <= GONE_BOUND_NS
        assert p2.free_slots == p2.slots
        e.start()
        p3 = p2.redial(timeout=10)
        p2.close()
        with p3:
            r3 = p3.register_region(4096, Perm.REMOTE_READ | Perm.LOCAL_WRITE)
            r3.view[:4] = b"back"
            assert p3.read(r3.remote_for(p3.identity, Op.READ), 0, 4) == b"back"
    finally:
        e.kill()


def benchrow_fields():
    """The JSON names of internal/benchrow.Row's fields."""
    import glob
    import re

    names = set()
    for f in glob.glob(os.path.join(bed.ROOT, "internal", "benchrow", "*.go")):
        with open(f) as fh:
            names |= set(re.findall(r'json:"([a-z0-9_]+)', fh.read()))
    return names


@pytest.mark.parametrize("test,depth", [("read_bw", 16), ("read_lat", 1)])
def test_perf_rows(loop, test, depth):
    """python3 -m onerma.perf: every byte verified, its -json row made of
    internal/benchrow.Row's fields, of system onerma-python, with no
    errors and the CPU time per op."""
    import json
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.path.join(bed.ROOT, "python"))
    out = subprocess.run([sys.executable, "-m", "onerma.perf", test, "-socket", loop.socket, "-self", "-s", "64", "-O",
                          str(depth), "-D", "300ms", "-warmup", "100ms", "-verify", "-json", "-setup", "e2e"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    assert set(row) <= benchrow_fields(), set(row) - benchrow_fields()
    assert (row["system"], row["setup"], row["test"], row["size"], row["outstanding"]) == (
        "onerma-python", "e2e", test, 64, depth)
    assert row["errors"] == 0 and row["ops"] > 0 and row["ops_per_sec"] > 0 and row["cpu_ns_per_op"] > 0
    assert 0 < row["p50_us"] <= row["p99_us"] <= row["p999_us"]
    assert row["command"].startswith("python3 -m onerma.perf " + test)
    bad = subprocess.run([sys.executable, "-m", "onerma.perf", test, "-socket", loop.socket, "-self", "-s", "5000"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "-s 5000: want 1..4096" in bad.stderr
