"""Tests that need no engine: the enums and layouts against onerma.h and
the compiler, the errors, finding the library, keys, and kv's decoders."""

import errno
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

import bed
import onerma
from onerma import _lib, kv
from onerma.errors import error, status_error
from onerma.types import KEYX_ERRORS, ErrorCode, Op, Perm, Status

HEADER = os.path.join(bed.ROOT, "libonerma", "include", "onerma.h")


def header():
    with open(HEADER) as f:
        return f.read()


def header_enum(name):
    """The members of enum name in onerma.h, with their values (implicit
    ones counted on from the last)."""
    body = re.search(r"enum %s \{(.*?)\};" % name, header(), re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    out, nxt = {}, 0
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        m = re.match(r"(\w+)(?:\s*=\s*(.+))?$", item)
        name_, expr = m.group(1), m.group(2)
        if expr is not None:
            expr = re.sub(r"\b(ONERMA_\w+)\b", lambda x: str(out[x.group(1)]), expr)
            nxt = eval(expr, {})  # integer literals, <<, |, names resolved above
        out[name_] = nxt
        nxt += 1
    return out


@pytest.mark.parametrize("cenum,prefix,pyenum", [
    ("onerma_status", "ONERMA_STATUS_", Status),
    ("onerma_op_type", "ONERMA_OP_", Op),
    ("onerma_perm", "ONERMA_PERM_", Perm),
    ("onerma_class", "ONERMA_CLASS_", onerma.Class),
])
def test_enum_matches_header(cenum, prefix, pyenum):
    want = {k[len(prefix):]: v for k, v in header_enum(cenum).items()}
    got = {name: int(m) for name, m in pyenum.__members__.items()}
    assert got == want


def test_error_codes_match_header():
    """Every code of enum onerma_error is an ErrorCode of the same value;
    the key exchange's codes may be missing from a header before it."""
    want = {k[len("ONERMA_E_"):]: v for k, v in header_enum("onerma_error").items() if k != "ONERMA_E_MAX"}
    got = {c.name: int(c.value) for c in ErrorCode}
    for name, v in want.items():
        assert got.get(name) == v, name
    extra = set(got) - set(want)
    if "onerma_keyx_dial" in header():
        assert not extra
    else:
        assert extra == {c.name for c in KEYX_ERRORS}


def test_constants_match_header():
    h = header()
    for name, v in [("MAX_OP_BYTES", onerma.MAX_OP_BYTES), ("KEY_SIZE", onerma.KEY_SIZE),
                    ("MAX_NAME_BYTES", onerma.types.MAX_NAME_BYTES), ("MAX_ALLOC_SLOTS", onerma.types.MAX_ALLOC_SLOTS)]:
        assert re.search(r"#define ONERMA_%s (\d+)" % name, h).group(1) == str(v), name
    assert '#define ONERMA_DEFAULT_SOCKET "%s"' % onerma.DEFAULT_SOCKET in h
    assert "#define ONERMA_MAX_REGION_BYTES (1ULL << 40)" in h and onerma.types.MAX_REGION_BYTES == 1 << 40
    assert "#define ONERMA_MAX_LOOKUP_REGION_BYTES 0xffffffffULL" in h
    assert onerma.types.MAX_LOOKUP_REGION_BYTES == 0xFFFFFFFF
    assert re.search(r"#define ONERMA_MAX_PTR_SHIFT (\d+)", h).group(1) == str(onerma.types.MAX_PTR_SHIFT)
    assert re.search(r"#define ONERMA_FLAG_LOOKUP_BUCKET (\d+)", h).group(1) == str(onerma.types.FLAG_LOOKUP_BUCKET)


def go_source(path):
    with open(os.path.join(bed.ROOT, path)) as f:
        return f.read()


def test_lookup_matches_go():
    """BucketLayout's fields are abi.BucketLayout's, in its order (the
    order of register_region's "layout" array, ctlmsg's), and struct
    onerma_bucket_layout's; the LOOKUP constants are abi's."""
    body = re.search(r"type BucketLayout struct \{(.*?)\}", go_source("abi/lookup.go"), re.S).group(1)
    names = [re.sub(r"(?<!^)([A-Z])", r"_\1", line.split()[0]).lower() for line in body.strip().splitlines()]
    assert tuple(names) == onerma.BucketLayout._fields
    ctl = re.search(r"unsigned integers of abi.BucketLayout in its field order \((.*?)\)", go_source("ctlmsg/request.go"),
                    re.S).group(1)
    assert tuple(n.strip() for n in ctl.replace("\n//", " ").split(",")) == onerma.BucketLayout._fields
    cbody = re.search(r"struct onerma_bucket_layout \{(.*?)\};", header(), re.S).group(1)
    assert tuple(re.findall(r"uint32_t (\w+);", cbody)) == onerma.BucketLayout._fields
    abi = go_source("abi/command.go") + go_source("abi/lookup.go")
    assert re.search(r"OpLookup Op = (\d+)", abi).group(1) == str(int(Op.LOOKUP))
    assert "FlagLookupBucket uint8 = 1 << 0" in abi and onerma.types.FLAG_LOOKUP_BUCKET == 1
    assert "const MaxLookupRegionBytes = 1<<32 - 1" in abi
    assert re.search(r"const MaxPtrShift = (\d+)", abi).group(1) == str(onerma.types.MAX_PTR_SHIFT)
    perm = go_source("abi/perm.go")
    assert "PermRemoteLookup Perm = 1 << 5" in perm and Perm.REMOTE_LOOKUP == 1 << 5
    assert Perm.ANY == Perm.ALL | Perm.REMOTE_LOOKUP and not Perm.ALL & Perm.REMOTE_LOOKUP


def test_bucket_layout(lib):
    """BucketLayout.check is abi.BucketLayout.Validate (through libonerma),
    each rule with its message; fields outside a u32 are refused before C
    sees them."""
    good = onerma.BucketLayout(256, 32, 0, 8, 8, 8, 0, 16, 4)
    assert good.check() is good and good.linked == 0 and good.entries == 8 and good.target_offset == 64
    assert good._replace(ptr_shift=onerma.types.MAX_PTR_SHIFT).check().ptr_shift == 32
    assert onerma.BucketLayout(4096, 4032, 0, 1, 1, 1, 6, 2, 1).target_offset == 4032
    for lay, msg in [
        ((0, 1, 0, 1, 0, 1, 0, 0, 1), "bucket size not in 1..4096: 0"),
        ((4097, 1, 0, 1, 0, 1, 0, 0, 1), "bucket size not in 1..4096: 4097"),
        ((64, 65, 0, 1, 0, 1, 0, 0, 1), "entry stride not in 1..bucket size: stride 65, bucket 64"),
        ((4096, 4033, 0, 1, 0, 1, 0, 0, 1), "the entry leaves no room for a target: stride 4033"),
        ((4096, 4033, 0, 1, 0, 1, 33, 0, 1), "the entry leaves no room for a target: stride 4033"),
        ((64, 16, 0, 8, 8, 8, 33, 0, 1), "pointer shift above 32: 33"),
        ((64, 16, 0, 3, 8, 8, 0xFFFFFFFF, 0, 1), "pointer shift above 32: 4294967295"),  # before the fields
        ((64, 16, 0, 8, 8, 8, 0, 8, 3), "field width not 1, 2, 4 or 8: length width 3"),
        ((64, 16, 9, 8, 0, 8, 0, 0, 1), "field outside the entry: tag at 9, 8 bytes, entry 16 bytes"),
    ]:
        with pytest.raises(onerma.OnermaError) as ei:
            onerma.BucketLayout(*lay).check()
        assert ei.value.code is ErrorCode.INVALID and msg in ei.value.detail, lay
    for bad in (-1, 1 << 32, "8"):
        with pytest.raises(ValueError):
            onerma.BucketLayout(64, 16, 0, bad, 8, 8, 0, 0, 1).check()
        with pytest.raises(ValueError):
            onerma.BucketLayout(64, 16, 0, 8, 8, 8, bad, 0, 1).check()
    with pytest.raises(TypeError):  # a layout of nine, without ptr_shift: len_width missing
        onerma.BucketLayout(256, 32, 0, 8, 8, 8, 16, 4)
    for e in (0, 1, 63, 64, 65, 4095):
        assert lib.onerma_lookup_target_offset(e) == onerma.types.lookup_target_offset(e)


def test_layouts_match_compiler(tmp_path):
    """Every struct the package passes to C, and the struct formats of the
    data path, against what the C compiler lays out."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler")
    structs = {
        "onerma_options": _lib._Options, "onerma_identity": _lib._Identity, "onerma_op": _lib._Op,
        "onerma_completion": _lib._Completion, "onerma_bucket_layout": _lib._BucketLayout,
    }
    if "struct onerma_grant {" in header():
        structs["onerma_grant"] = _lib._Grant
    lines = []
    for cname, py in structs.items():
        lines.append('printf("%s .sizeof %%zu\\n", sizeof(struct %s));' % (cname, cname))
        for f, _ in py._fields_:
            lines.append('printf("%s %s %%zu\\n", offsetof(struct %s, %s));' % (cname, f, cname, f))
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include <onerma.h>\nint main(void) {\n%s\nreturn 0;\n}\n'
                   % "\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", os.path.dirname(HEADER), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    c = {}
    for line in out.splitlines():
        s, f, v = line.split()
        c[(s, f)] = int(v)
    for cname, py in structs.items():
        assert c[(cname, ".sizeof")] == ctypes_sizeof(py), cname
        for f, _ in py._fields_:
            assert c[(cname, f)] == getattr(py, f).offset, (cname, f)
    # The packed formats: each field at its C offset.
    op_fields = ["type", "slot", "cookie", "remote_addr", "remote_region", "remote_offset", "key", "local",
                 "local_offset", "length", "flags", "tag"]
    assert offsets(_lib.OP_FORMAT) == [c[("onerma_op", f)] for f in op_fields]
    assert struct.calcsize(_lib.OP_FORMAT) == c[("onerma_op", ".sizeof")]
    cpl_fields = ["cookie", "slot", "status", "op", "reserved", "issue_delay_ns", "total_delay_ns", "length"]
    assert offsets(_lib.COMPLETION_FORMAT) == [c[("onerma_completion", f)] for f in cpl_fields]
    assert struct.calcsize(_lib.COMPLETION_FORMAT) == c[("onerma_completion", ".sizeof")]


def ctypes_sizeof(t):
    import ctypes

    return ctypes.sizeof(t)


def offsets(fmt):
    """The offset of each field of a little-endian struct format."""
    out, off = [], 0
    for n, code in re.findall(r"(\d*)([a-zA-Z])", fmt[1:]):
        n = int(n or 1)
        if code == "x":
            off += n
            continue
        out.append(off)
        off += struct.calcsize("<" + ("%ds" % n if code == "s" else code))
    return out


def test_status_and_error_names_match_library(lib):
    for s in Status:
        assert lib.onerma_status_str(s).decode() == s.name
    for c in ErrorCode:
        if c == ErrorCode.BASE or (c in KEYX_ERRORS and not lib.has_keyx):
            continue
        assert lib.strerror(c) != "unknown error", c.name


def test_errors():
    e = error(-errno.ENOENT, "dial /nowhere", detail=False)
    assert type(e) is onerma.OnermaError and e.errno == errno.ENOENT and e.code == errno.ENOENT
    assert str(e) == "onerma: dial /nowhere: No such file or directory"
    e = error(-ErrorCode.ENGINE_GONE, "poll", detail=False)
    assert isinstance(e, onerma.EngineGone) and isinstance(e, onerma.StatusError)
    assert e.status is Status.ENGINE_GONE and e.code is ErrorCode.ENGINE_GONE and e.errno is None
    e = error(-errno.ETIMEDOUT, "wait", detail=False)
    assert isinstance(e, onerma.Timeout) and isinstance(e, TimeoutError)
    e = error(-ErrorCode.OP, "post LOOKUP", detail=False)
    assert type(e) is onerma.OnermaError and e.code is ErrorCode.OP and "LOOKUP" in str(e)
    e = error(-ErrorCode.RING_FULL, "post READ", detail=False)
    assert type(e) is onerma.OnermaError and e.code is ErrorCode.RING_FULL
    e = error(-ErrorCode.KX_REVOKED, "keyx fetch", detail=False, keyx=True)
    assert isinstance(e, onerma.Refused) and isinstance(e, onerma.KeyxError)
    e = error(-ErrorCode.CERT_REFUSED, "keyx fetch", detail=False, keyx=True)
    assert isinstance(e, onerma.Refused)
    for c in (ErrorCode.CREDS_FILE, ErrorCode.CREDS_EXPIRED, errno.ENOENT):
        assert isinstance(error(-c, "keyx dial", detail=False, keyx=True), onerma.CredentialsError)
    e = error(-ErrorCode.TLS, "keyx dial", detail=False, keyx=True)
    assert type(e) is onerma.KeyxError


def test_completion_check():
    ok = onerma.Completion(5, 1, Status.OK, Op.READ, 10, 20, 64)
    assert ok.ok and ok.check() is ok
    bad = onerma.Completion(6, 1, Status.REMOTE_BOUNDS, Op.WRITE, 10, 20, 0)
    with pytest.raises(onerma.StatusError) as ei:
        bad.check()
    assert ei.value.status is Status.REMOTE_BOUNDS and ei.value.completion is bad
    assert "WRITE (cookie 6) completed REMOTE_BOUNDS" in str(ei.value)
    gone = onerma.Completion(7, 1, Status.ENGINE_GONE, Op.READ, 0, 0, 0)
    with pytest.raises(onerma.EngineGone):
        gone.check()
    assert isinstance(status_error(onerma.Completion(8, 1, 99, 9, 0, 0, 0)), onerma.StatusError)
    # A LOOKUP's miss is a NotFound (a StatusError); its other statuses are StatusErrors.
    miss = onerma.Completion(9, 1, Status.REMOTE_NOT_FOUND, Op.LOOKUP, 0, 0, 0)
    with pytest.raises(onerma.NotFound) as ei:
        miss.check()
    assert isinstance(ei.value, onerma.StatusError) and ei.value.status is Status.REMOTE_NOT_FOUND
    assert ei.value.bucket is None and "LOOKUP (cookie 9) completed REMOTE_NOT_FOUND" in str(ei.value)
    for st in (Status.REMOTE_LOOKUP_BOUNDS, Status.REMOTE_LOOKUP_TOO_LARGE):
        e = status_error(onerma.Completion(10, 1, st, Op.LOOKUP, 0, 0, 0))
        assert type(e) is onerma.StatusError and e.status is st


def test_remote_and_identity():
    r = onerma.Remote("10.0.0.2", 0x10001, bytes(16), 4096)
    assert r.addr == 0x0A000002 and r.owner == "10.0.0.2"
    assert "key" not in repr(r) and "0x10001" in repr(r)
    with pytest.raises(ValueError):
        onerma.Remote("10.0.0.2", 1, bytes(15))
    with pytest.raises(ValueError):
        onerma.Remote("10.0.0.2", 0, bytes(16))
    with pytest.raises(ValueError):
        onerma.Remote("300.0.0.2", 1, bytes(16))
    assert onerma.Identity(0x0A000001, 7).address == "10.0.0.1"


# K_d from aesni.DeriveKey (Go) under K_r = 00 01 .. 0f.
KD_VECTORS = [
    ("10.0.0.1", 7, Op.READ, "89aadccb00209ae30690405a4a00211f"),
    ("10.0.0.2", 4194304, Op.WRITE, "6252359e3b810620bc246febe2391cc7"),
    ("192.168.1.20", 0xFFFFFFFF, Op.REKEY, "a59b25d550137ade19ba9b3f72ebe887"),
]


@pytest.mark.parametrize("addr,pid,op,kd", KD_VECTORS)
def test_derive_kd(lib, addr, pid, op, kd):
    assert onerma.derive_kd(bytes(range(16)), addr, pid, op).hex() == kd


def test_derive_kd_refuses(lib):
    with pytest.raises(ValueError):
        onerma.derive_kd(bytes(8), "10.0.0.1", 1, Op.READ)


def test_dial_without_engine(lib, tmp_path):
    with pytest.raises(onerma.OnermaError) as ei:
        onerma.Portal(str(tmp_path / "none.sock"), "pytest")
    assert ei.value.errno == errno.ENOENT and "none.sock" in str(ei.value)


def run_py(code, env=None):
    e = dict(os.environ, PYTHONPATH=os.path.join(bed.ROOT, "python"))
    e.pop(_lib.ENV_LIB, None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e)


def test_library_search(lib):
    """$ONERMA_LIB alone when set; else the tree's libonerma/build."""
    r = run_py("import onerma; print(onerma.library())", {_lib.ENV_LIB: "/nonexistent/libonerma.so"})
    assert r.returncode != 0 and "LibraryNotFound" in r.stderr and "/nonexistent/libonerma.so" in r.stderr
    assert "ONERMA_LIB" in r.stderr
    built = os.path.join(bed.ROOT, "libonerma", "build", "libonerma.so.0")
    if os.path.exists(built):
        r = run_py("import onerma; print(onerma.library())")
        assert r.stdout.strip() == built, r.stderr
    r = run_py("import onerma; print(onerma.library())", {_lib.ENV_LIB: lib.path})
    assert r.stdout.strip() == lib.path, r.stderr


def test_import_without_numpy(lib):
    """numpy is optional: the package imports and works without it."""
    r = run_py("import sys; sys.modules['numpy'] = None\n"
               "import onerma\n"
               "print(onerma.derive_kd(bytes(range(16)), '10.0.0.1', 7, onerma.Op.READ).hex())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == KD_VECTORS[0][3]


# ---- kv ----

# XXH64 (seed 0) of pattern bytes (i*167 + i>>9 + 3) and of strings, as
# github.com/cespare/xxhash/v2 computes them.
XXH64_VECTORS = [
    (0, 0xEF46DB3751D8E999), (1, 0x1F25C8D0BC1F4BB6), (3, 0x8500E4209358C3A2), (4, 0xF54F4E0EF84032A6),
    (7, 0x77D6FC3819AC8ABE), (8, 0x8354087F51FF707F), (15, 0x4E7BF6F2896554AA), (16, 0x9178444EDEAE7CD7),
    (31, 0xDB00C73E32DC78E8), (32, 0xDD312FDC26CBB062), (33, 0x96B7B38E71CA4069), (55, 0xEF99ACD9A53DD0BB),
    (56, 0xABA7D1002B269980), (63, 0x29A74F373ED5EBFA), (64, 0xA024B9F9178108DB), (100, 0x0F281F590BC7660F),
    (250, 0xB6B895A2AD000B08), (1000, 0xE5A0F35BE356047A),
    (b"hello", 0x26C7827D889F6DA3), (b"10.0.0.1:7001#0", 0xF02F3A96161A0603),
    (b"127.0.0.1:7001#159", 0xE9C0ECD0C6F64E84),
]


@pytest.mark.parametrize("data,want", XXH64_VECTORS)
def test_xxh64(data, want):
    if isinstance(data, int):
        data = bed.patterned(0, data)
    assert kv.xxh64(data) == want


def test_ring_places_as_go():
    """Replicas of keys on four servers, R = 3, as kv's ring places them."""
    r = kv.Ring(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "10.0.0.9:7001"])
    for key, want in [("a", [1, 0, 3]), ("hello", [2, 0, 1]), ("key-1", [0, 2, 3]), ("key-2", [0, 2, 3]),
                      ("key-3", [3, 1, 0]), ("user:12345", [0, 2, 1]), ("x", [3, 2, 1])]:
        assert r.replicas(kv.key_hash(key.encode()), 3) == want, key
    with pytest.raises(ValueError):
        kv.Ring(["a:1", "a:1"])


# A server's slots and records as kv/format.go writes them.
SLAB = 1 << 20
MAX_RECORD = kv.record_len(kv.MAX_KEY_BYTES, 65536)


def inline_slot(seq, key, value):
    s = bytearray(64)
    struct.pack_into("<IBBH", s, 0, seq, kv.KIND_INLINE, len(key), len(value))
    s[8:8 + len(key)] = key
    s[8 + len(key):8 + len(key) + len(value)] = value
    struct.pack_into("<Q", s, 56, kv.xxh64(bytes(s[:56])))
    return bytes(s)


def pointer_slot(seq, key, stamp, off, n):
    s = bytearray(64)
    struct.pack_into("<IBBH", s, 0, seq, kv.KIND_POINTER, len(key), 0)
    struct.pack_into("<QQII", s, 8, kv.key_hash(key), stamp, off // 64, n)
    struct.pack_into("<Q", s, 56, kv.xxh64(bytes(s[:56])))
    return bytes(s)


def record(stamp, key, value):
    r = bytearray(kv.record_len(len(key), len(value)))
    struct.pack_into("<QIBBH", r, 0, stamp, len(value), len(key), kv.KIND_RECORD, 0)
    r[16:16 + len(key)] = key
    r[16 + len(key):16 + len(key) + len(value)] = value
    struct.pack_into("<Q", r, len(r) - 8, kv.xxh64(bytes(r[:-8])))
    return bytes(r)


def test_decode_slots():
    s = kv.decode_slot(inline_slot(2, b"hello", b"world"), SLAB, MAX_RECORD)
    assert (s.kind, s.key, s.value, s.seq) == (kv.KIND_INLINE, b"hello", b"world", 2)
    assert s.matches(b"hello", kv.key_hash(b"hello")) and not s.matches(b"hellp", 0)
    value = bytes(range(200))
    rec = record(77, b"big", value)
    s = kv.decode_slot(pointer_slot(4, b"big", 77, 4096, len(rec)), SLAB, MAX_RECORD)
    assert (s.kind, s.stamp, s.off, s.length) == (kv.KIND_POINTER, 77, 4096, len(rec))
    assert s.matches(b"big", kv.key_hash(b"big"))
    assert kv.decode_record(rec, s, b"big") == value
    assert kv.decode_slot(bytes(64), SLAB, MAX_RECORD).kind == kv.KIND_EMPTY
    with pytest.raises(kv.Stale):
        kv.decode_record(record(78, b"big", value), s, b"big")  # replaced since
    with pytest.raises(kv.Stale):
        kv.decode_record(record(77, b"bih", value), s, b"big")


def test_decode_slot_negative_space():
    """Flip any one bit of a valid slot or record: refused, never decoded
    into something else."""
    for valid in (inline_slot(2, b"hello", b"world"), pointer_slot(6, b"k", 9, 128, 100)):
        for i in range(64 * 8):
            b = bytearray(valid)
            b[i // 8] ^= 1 << (i % 8)
            with pytest.raises((kv.Unstable, kv.Corrupt)):
                kv.decode_slot(bytes(b), SLAB, MAX_RECORD)
    rec = record(9, b"k", b"v" * 75)
    s = kv.decode_slot(pointer_slot(6, b"k", 9, 128, len(rec)), SLAB, MAX_RECORD)
    for i in range(len(rec) * 8):
        b = bytearray(rec)
        b[i // 8] ^= 1 << (i % 8)
        with pytest.raises((kv.Unstable, kv.Stale, kv.Corrupt)):
            kv.decode_record(bytes(b), s, b"k")


def test_decode_slot_bounds():
    """Lengths are checked before they are used: a slot whose sum is right
    but whose lengths cannot be the server's is Corrupt."""
    for bad in (inline_slot(2, b"", b"x"), inline_slot(2, b"k" * 20, b"v" * 29)):
        with pytest.raises(kv.Corrupt):
            kv.decode_slot(bad, SLAB, MAX_RECORD)
    for off, n in [(SLAB - 64, 128), (SLAB + 64, 100), (0, MAX_RECORD + 1), (0, 10)]:
        with pytest.raises(kv.Corrupt):
            kv.decode_slot(pointer_slot(2, b"k", 1, off, n), SLAB, MAX_RECORD)
    with pytest.raises(kv.Unstable):
        kv.decode_slot(inline_slot(3, b"k", b"v"), SLAB, MAX_RECORD)  # odd: being rewritten
    with pytest.raises(kv.Unstable):
        kv.decode_slot(b"\0" * 8 + b"\1" + b"\0" * 55, SLAB, MAX_RECORD)  # sequence 0, not all zero
    with pytest.raises(kv.Corrupt):
        kv.decode_slot(bytes(63), SLAB, MAX_RECORD)


def layout_bytes(**kw):
    f = dict(instance=1, buckets=1024, ways=8, max_value=65536, index_region=0x10001, index_bytes=1024 * 8 * 64,
             slab_region=0x10002, slab_bytes=SLAB, owner=bytes([10, 0, 0, 2]), keyx_port=41203)
    f.update(kw)
    return bytes([kv.PROTO_VERSION]) + struct.pack(">QQIIIQIQ4sH", *f.values())


def test_layout():
    l = kv.Layout.parse(layout_bytes())
    assert (l.buckets, l.ways, l.owner, l.keyx_port, l.index_region) == (1024, 8, "10.0.0.2", 41203, 0x10001)
    for kw in [dict(buckets=1000), dict(buckets=0), dict(ways=0), dict(ways=65), dict(index_bytes=100),
               dict(max_value=(1 << 20) + 1)]:
        with pytest.raises(onerma.OnermaError):
            kv.Layout.parse(layout_bytes(**kw))
    with pytest.raises(onerma.OnermaError):
        kv.Layout.parse(layout_bytes()[:-1])
    with pytest.raises(onerma.OnermaError):
        kv.Layout.parse(b"\2" + layout_bytes()[1:])



def test_pip_install(lib, tmp_path):
    """pip install ./python, where pip (and setuptools' wheel) are: the
    installed package finds libonerma through ONERMA_LIB or the system."""
    import importlib.util

    if not all(importlib.util.find_spec(m) for m in ("pip", "setuptools", "wheel")):
        pytest.skip("no pip, setuptools and wheel for this python3")
    src = tmp_path / "src"
    shutil.copytree(os.path.join(bed.ROOT, "python"), src, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                        "--disable-pip-version-check", "--target", str(target), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {"__init__.py", "_lib.py", "errors.py", "keyx.py", "kv.py", "portal.py", "types.py"} <= set(
        os.listdir(target / "onerma"))
    env = dict(os.environ, PYTHONPATH=str(target), ONERMA_LIB=lib.path)
    r = subprocess.run([sys.executable, "-c", "import onerma; print(onerma.__file__); print(onerma.library())"],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(target / "onerma" / "__init__.py"), lib.path]


def test_readme_python_compiles():
    """The README's Python (the block after <!-- py-app) is Python; e2e
    TestREADMETour runs it against the tour's engines."""
    with open(os.path.join(bed.ROOT, "README.md")) as f:
        readme = f.read()
    m = re.search(r"<!-- py-app:.*?-->\s*```python\n(.*?)```", readme, re.S)
    assert m, "README.md has no <!-- py-app --> block"
    compile(m.group(1), "README.md", "exec")
