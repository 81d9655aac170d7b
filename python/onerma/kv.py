"""Reading OneRMA's key/value cache (Go package kv, `rmakv server`) from
Python: a GET by one-sided READs through the engine, following the
cache's documented layout and validation (go doc ./kv; kv/format.go), and
SET and DELETE over the servers' RPC.

    with onerma.Portal(socket, "kv-reader") as p:
        c = onerma.kv.Client(p, ["10.0.0.2:7001"], "creds")
        c.get(b"hello")              # b"world", or None

A GET reads the key's bucket (one READ of Ways × 64 bytes at bucket ×
Ways × 64 of the index region, bucket = XXH64(key) & (Buckets - 1)) and
decodes each slot:

    slot (64 B, little endian)
       0  seq u32      even: stable version; odd: being rewritten; 0: never written
       4  kind u8      0 empty, 1 inline, 2 pointer
       5  key len u8
       6  value len u16 (inline)
       8  body 48 B    inline: key ‖ value
                       pointer: key hash u64 ‖ stamp u64 ‖ offset/64 u32 ‖ record length u32
      56  sum u64      XXH64 of bytes 0..55

An inline slot holding the key answers; a pointer slot whose key hash
matches leads to the record it points to in the slab region, read whole
(one READ per 4 KB):

    record (64-byte aligned)
       0  stamp u64    the slot names it
       8  value len u32
      12  key len u8, kind u8 (3), zero u16
      16  key ‖ value
       …  sum u64      XXH64 of everything before it

An odd sequence or a sum that does not match (a READ that overlapped the
server's update), or a record of another stamp or key (replaced since
its slot was read), reads the bucket again, up to 32 times; bytes that
cannot be a slot or record of the server (lengths beyond the slot or
record, a pointer outside the slab) fail over to the next replica, as a
READ that fails does. What the server wrote is treated as untrusted:
every length is checked before it is used.

The layout of a server's regions comes from its RPC (DESCRIBE, inside TLS
1.3 with the client credentials of `rmactl creds`, through Python's ssl),
the K_d of both regions from its key exchange (keyx, through libonerma).
Keys are placed on servers as Go's client places them: a consistent-hash
ring of 160 points per server, named by its RPC address, R replicas.
"""

import bisect
import os
import socket
import ssl
import struct

from .errors import CredentialsError, EngineGone, OnermaError, Refused, StatusError
from .types import MAX_OP_BYTES, Op, addr_str

SLOT_BYTES = 64
MAX_INLINE = 48
MAX_KEY_BYTES = 250
MAX_VALUE_BYTES = 1 << 20
RECORD_HEADER_BYTES = 16
RECORD_OVERHEAD = RECORD_HEADER_BYTES + 8
SLAB_ALIGN = 64
KIND_EMPTY, KIND_INLINE, KIND_POINTER, KIND_RECORD = 0, 1, 2, 3
MAX_RETRIES = 32  # READs of one bucket again on one replica (kv.maxRetries)
MAX_ROUNDS = 2  # tries of each replica (kv.maxRounds)
VNODES = 160  # ring points per server (kv.ClientConfig.VNodes)
MAX_REPLICAS = 8

# The RPC (kv/rpc.go): frames of a big-endian u32 body length and the body.
OP_DESCRIBE, OP_SET, OP_DELETE = 1, 2, 3
CODE_OK, CODE_NOT_FOUND = 0, 1
PROTO_VERSION = 1
LAYOUT_BYTES = 1 + 8 + 8 + 4 + 4 + 4 + 8 + 4 + 8 + 4 + 2
MAX_FRAME = 1 + 1 + 4 + MAX_KEY_BYTES + MAX_VALUE_BYTES

_M64 = (1 << 64) - 1
_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5 = 9650029242287828579, 2870177450012600261


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc, lane):
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge(acc, v):
    acc ^= _round(0, v)
    return (acc * _P1 + _P4) & _M64


def xxh64(data, seed=0):
    """XXH64 of data (seed 0: what kv's sums and KeyHash use)."""
    b = memoryview(data).cast("B")
    n, i = len(b), 0
    if n >= 32:
        v1, v2 = (seed + _P1 + _P2) & _M64, (seed + _P2) & _M64
        v3, v4 = seed & _M64, (seed - _P1) & _M64
        while i + 32 <= n:
            l1, l2, l3, l4 = struct.unpack_from("<4Q", b, i)
            v1, v2, v3, v4 = _round(v1, l1), _round(v2, l2), _round(v3, l3), _round(v4, l4)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", b, i)[0])
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", b, i)[0] * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (b[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


def key_hash(key):
    """The hash that places a key: its bucket (low bits) and, mixed, its
    point on the ring (kv.KeyHash)."""
    return xxh64(key)


def ring_point(h):
    """A key hash mixed into its ring position (the splitmix64 finalizer)."""
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & _M64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & _M64
    return h ^ (h >> 31)


# ---- validation (kv.DecodeSlot, kv.DecodeRecord) ----


class Unstable(Exception):
    """A slot or record read while the server changed it: read again."""


class Stale(Exception):
    """A whole record that is not the one the slot pointed to: read the
    bucket again."""


class Corrupt(OnermaError):
    """Bytes that cannot be a slot or record the server wrote."""


class Slot:
    """A decoded, validated slot: seq, kind; inline: key and value; pointer:
    key_hash, stamp, off (bytes into the slab) and length (the record's)."""

    __slots__ = ("seq", "kind", "key", "value", "key_hash", "stamp", "off", "length")

    def __init__(self, seq=0, kind=KIND_EMPTY, key=b"", value=b"", key_hash=0, stamp=0, off=0, length=0):
        self.seq, self.kind, self.key, self.value = seq, kind, key, value
        self.key_hash, self.stamp, self.off, self.length = key_hash, stamp, off, length

    def matches(self, key, h):
        if self.kind == KIND_INLINE:
            return self.key == key
        if self.kind == KIND_POINTER:
            return self.key_hash == h
        return False


def decode_slot(s, slab_bytes, max_record):
    """Validate the 64 bytes of one slot as read from an index region
    (kv.DecodeSlot): an even sequence, a sum that matches, a known kind and
    lengths within the slot; a pointer's record wholly inside the slab and
    at most max_record bytes. Raises Unstable or Corrupt."""
    s = bytes(s[:SLOT_BYTES])
    if len(s) < SLOT_BYTES:
        raise Corrupt("kv: a slot of %d bytes" % len(s))
    seq = struct.unpack_from("<I", s)[0]
    if seq == 0:
        # Never written; content under sequence 0 is a first write under way.
        if s != bytes(SLOT_BYTES):
            raise Unstable()
        return Slot()
    if seq & 1 or struct.unpack_from("<Q", s, 56)[0] != xxh64(s[:56]):
        raise Unstable()
    kind, klen, vlen = s[4], s[5], struct.unpack_from("<H", s, 6)[0]
    body = s[8:56]
    if kind == KIND_EMPTY:
        return Slot(seq)
    if kind == KIND_INLINE:
        if klen == 0 or klen + vlen > MAX_INLINE:
            raise Corrupt("kv: an inline slot of a %d-byte key and %d-byte value" % (klen, vlen))
        return Slot(seq, KIND_INLINE, body[:klen], body[klen:klen + vlen])
    if kind == KIND_POINTER:
        h, stamp, off64, n = struct.unpack_from("<QQII", body)
        off = off64 * SLAB_ALIGN
        if vlen != 0 or klen == 0 or n < RECORD_OVERHEAD + klen or n > max_record or off > slab_bytes \
                or n > slab_bytes - off:
            raise Corrupt("kv: a pointer slot to %d bytes at %d of a %d-byte slab" % (n, off, slab_bytes))
        return Slot(seq, KIND_POINTER, key_hash=h, stamp=stamp, off=off, length=n)
    raise Corrupt("kv: a slot of kind %d" % kind)


def decode_record(rec, slot, key):
    """Validate a slab record read whole (the length bytes slot pointed to)
    against the slot and key that led to it, and return its value
    (kv.DecodeRecord). Raises Unstable (its sum fails: being written),
    Stale (another stamp, key or length) or Corrupt."""
    rec = bytes(rec)
    if len(rec) < RECORD_OVERHEAD or len(rec) != slot.length:
        raise Corrupt("kv: a record of %d bytes where the slot says %d" % (len(rec), slot.length))
    n = len(rec) - 8
    if struct.unpack_from("<Q", rec, n)[0] != xxh64(rec[:n]):
        raise Unstable()
    stamp, vlen, klen, kind = struct.unpack_from("<QIBB", rec)
    if kind != KIND_RECORD or klen == 0 or RECORD_HEADER_BYTES + klen + vlen != n:
        raise Stale()
    if stamp != slot.stamp or rec[RECORD_HEADER_BYTES:RECORD_HEADER_BYTES + klen] != key:
        raise Stale()
    return rec[RECORD_HEADER_BYTES + klen:n]


def record_len(klen, vlen):
    return RECORD_OVERHEAD + klen + vlen


# ---- the RPC (DESCRIBE, SET, DELETE) ----


class RPCRefused(OnermaError):
    """A server refused an RPC request; code is kv's reply code (5: not
    granted, 6: revoked, ...) and the message the server's."""

    def __init__(self, code, message):
        super().__init__("kv: server refused: " + message)
        self.kv_code = code


class Layout:
    """What a server tells its clients about its regions (kv.Layout)."""

    __slots__ = ("instance", "buckets", "ways", "max_value", "index_region", "index_bytes", "slab_region",
                 "slab_bytes", "owner", "keyx_port")

    @classmethod
    def parse(cls, b):
        """kv's parseLayout, with its checks."""
        if len(b) != LAYOUT_BYTES or b[0] != PROTO_VERSION:
            raise OnermaError("kv: describe: %d-byte layout of version %d, want %d bytes of version %d" % (
                len(b), b[0] if b else -1, LAYOUT_BYTES, PROTO_VERSION))
        l = cls()
        (l.instance, l.buckets, l.ways, l.max_value, l.index_region, l.index_bytes, l.slab_region, l.slab_bytes,
         owner, l.keyx_port) = struct.unpack_from(">QQIIIQIQ4sH", b, 1)
        l.owner = addr_str(int.from_bytes(owner, "big"))
        if l.buckets == 0 or l.buckets & (l.buckets - 1):
            raise OnermaError("kv: describe: %d buckets, not a power of two" % l.buckets)
        if not 1 <= l.ways <= 64 or l.ways * SLOT_BYTES > MAX_OP_BYTES:
            raise OnermaError("kv: describe: %d ways" % l.ways)
        if l.index_bytes // SLOT_BYTES // l.ways < l.buckets:
            raise OnermaError("kv: describe: an index of %d bytes cannot hold %d buckets of %d ways" % (
                l.index_bytes, l.buckets, l.ways))
        if l.max_value > MAX_VALUE_BYTES:
            raise OnermaError("kv: describe: values of up to %d bytes, above %d" % (l.max_value, MAX_VALUE_BYTES))
        return l

    @property
    def max_record(self):
        return record_len(MAX_KEY_BYTES, self.max_value)


def _pem_blocks(text):
    out, cur, kind = [], [], None
    for line in text.splitlines():
        if line.startswith("-----BEGIN "):
            kind, cur = line[11:].rstrip("-"), [line]
        elif line.startswith("-----END ") and kind:
            cur.append(line)
            out.append((kind, "\n".join(cur) + "\n"))
            kind = None
        elif kind:
            cur.append(line)
    return out


def client_tls(creds):
    """An ssl.SSLContext for a kv server's RPC from the client credentials
    of directory creds (client.pem: the CA's certificate, the client's
    certificate, its private key): TLS 1.3 only, the server verified
    against that CA and the host dialled. When libonerma has the key
    exchange client, the credentials are first checked as it checks them
    (file modes and owners, role, validity)."""
    from . import _lib, keyx

    if _lib.load().has_keyx:
        keyx.check_creds(creds)
    with open(os.path.join(creds, "client.pem")) as f:
        blocks = _pem_blocks(f.read())
    certs = [b for k, b in blocks if k == "CERTIFICATE"]
    keys = [b for k, b in blocks if k.endswith("PRIVATE KEY")]
    if len(certs) != 2 or len(keys) != 1:
        raise OnermaError("kv: %s/client.pem: want the CA's certificate, the client's and its key" % creds)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(cadata=certs[0])
    # load_cert_chain reads files only: the client's certificate and key
    # through a memfd, never on disk.
    fd = os.memfd_create("onerma-kv-client", os.MFD_CLOEXEC)
    try:
        os.write(fd, (certs[1] + keys[0]).encode())
        ctx.load_cert_chain("/proc/self/fd/%d" % fd)
    finally:
        os.close(fd)
    return ctx


class RPC:
    """One connection to a server's RPC: RPC(addr, ctx) with addr
    "host:port" and ctx client_tls(creds)."""

    def __init__(self, addr, ctx, timeout=5.0):
        host, port = addr.rsplit(":", 1)
        self.host = host.strip("[]")
        raw = socket.create_connection((self.host, int(port)), timeout=timeout)
        try:
            self.s = ctx.wrap_socket(raw, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise

    def call(self, body):
        """Send one request and return its reply's body after the code;
        raises RPCRefused for a refusal (NotFound's code included)."""
        if len(body) > MAX_FRAME:
            raise OnermaError("kv: a frame of %d bytes, at most %d" % (len(body), MAX_FRAME))
        self.s.sendall(struct.pack(">I", len(body)) + body)
        n = struct.unpack(">I", self._read(4))[0]
        if n == 0 or n > MAX_FRAME:
            raise OnermaError("kv: a reply frame of %d bytes" % n)
        b = self._read(n)
        if b[0] != CODE_OK:
            raise RPCRefused(b[0], b[1:].decode("utf-8", "replace"))
        return b[1:]

    def _read(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            if not chunk:
                raise OnermaError("kv: the server closed the connection")
            out += chunk
        return bytes(out)

    def describe(self):
        return Layout.parse(self.call(bytes([OP_DESCRIBE])))

    def close(self):
        self.s.close()


class Ring:
    """kv's consistent-hash ring: VNODES points per server, placed by the
    XXH64 of "NAME#k"; a key's replicas are the first distinct servers at
    or after its point."""

    def __init__(self, names, vnodes=VNODES):
        if not names or len(names) > 255 or len(set(names)) != len(names):
            raise ValueError("kv: servers %r: want 1..255 distinct names" % (names,))
        pts = sorted((xxh64(("%s#%d" % (name, v)).encode()), i) for i, name in enumerate(names) for v in range(vnodes))
        self.points = [p for p, _ in pts]
        self.owners = [o for _, o in pts]
        self.n = len(names)

    def replicas(self, h, want):
        want = min(want, self.n, MAX_REPLICAS)
        i = bisect.bisect_left(self.points, ring_point(h))
        out = []
        for k in range(len(self.points)):
            if len(out) == want:
                break
            o = self.owners[(i + k) % len(self.points)]
            if o not in out:
                out.append(o)
        return out


class Unavailable(OnermaError):
    """No replica of the key could answer the GET."""


class _Server:
    def __init__(self, addr):
        self.addr = addr
        self.layout = None
        self.index = self.slab = None  # keyx.Grant of each region


class Client:
    """A client of the cache: GETs by one-sided READs through portal (a
    Portal), SET and DELETE over the servers' RPC.

    servers are the servers' RPC addresses ("host:port"), in the order
    every client names them (they place keys); creds the directory of the
    client credentials; replicas the servers holding each key (default
    min(3, servers)). Not safe for concurrent use, as the Portal."""

    def __init__(self, portal, servers, creds, replicas=None, timeout=5.0):
        self.portal, self.creds, self.timeout = portal, creds, timeout
        self.servers = [_Server(a) for a in servers]
        self.ring = Ring(list(servers))
        self.replicas = min(3, len(servers)) if replicas is None else replicas
        if not 1 <= self.replicas <= min(len(servers), MAX_REPLICAS):
            raise ValueError("kv: replicas %d, want 1..%d" % (self.replicas, min(len(servers), MAX_REPLICAS)))
        self._ctx = None
        self.retries = 0  # buckets read again after a race with an update

    def _tls(self):
        if self._ctx is None:
            self._ctx = client_tls(self.creds)
        return self._ctx

    def _rpc(self, srv, body):
        c = RPC(srv.addr, self._tls(), self.timeout)
        try:
            return c.call(body)
        finally:
            c.close()

    def refresh(self, srv):
        """Fetch a server's layout (DESCRIBE) and the K_d of its two
        regions (keyx)."""
        from . import keyx

        c = RPC(srv.addr, self._tls(), self.timeout)
        try:
            l = c.describe()
        finally:
            c.close()
        host = srv.addr.rsplit(":", 1)[0]
        with keyx.KeyExchange("%s:%d" % (host, l.keyx_port), self.creds, self.timeout) as kx:
            idx = kx.fetch(self.portal, l.index_region, Op.READ, self.timeout)
            slab = kx.fetch(self.portal, l.slab_region, Op.READ, self.timeout)
        if idx.owner != l.owner or slab.owner != l.owner:
            raise OnermaError("kv: server %s: its key exchange names engine %s, its layout %s" % (
                srv.addr, idx.owner, l.owner))
        srv.layout, srv.index, srv.slab = l, idx, slab

    def get(self, key, default=None):
        """The value of key (bytes), or default when the cache does not
        hold it. Raises Unavailable when no replica could answer, and
        EngineGone when this process's engine went away."""
        key = bytes(key)
        if not 0 < len(key) <= MAX_KEY_BYTES:
            raise ValueError("kv: a key of %d bytes, want 1..%d" % (len(key), MAX_KEY_BYTES))
        h = key_hash(key)
        reps = self.ring.replicas(h, self.replicas)
        errors = []
        for _ in range(MAX_ROUNDS):
            for i in reps:
                srv = self.servers[i]
                try:
                    if srv.layout is None:
                        self.refresh(srv)
                    found, val = self._get_from(srv, key, h)
                except (EngineGone, CredentialsError, Refused, RPCRefused):
                    raise  # this process's engine or credentials: no replica can help
                except (StatusError, Corrupt, Unstable, OSError, OnermaError) as e:
                    # A READ refused for its key or region: the server may
                    # have rekeyed or restarted; take its view again.
                    srv.layout = None
                    errors.append("%s: %s" % (srv.addr, e or type(e).__name__))
                    continue
                return val if found else default
        raise Unavailable("kv: GET %r: every replica failed: %s" % (key[:32], "; ".join(errors)))

    def _get_from(self, srv, key, h):
        l, p = srv.layout, self.portal
        bucket = h & (l.buckets - 1)
        n = l.ways * SLOT_BYTES
        for _ in range(MAX_RETRIES):
            b = p.read(srv.index, bucket * n, n, timeout=self.timeout)
            unstable = corrupt = False
            target = None
            for w in range(l.ways):
                try:
                    s = decode_slot(b[w * SLOT_BYTES:(w + 1) * SLOT_BYTES], l.slab_bytes, l.max_record)
                except Unstable:
                    unstable = True
                    continue
                except Corrupt:
                    corrupt = True
                    continue
                if not s.matches(key, h):
                    continue
                if s.kind == KIND_INLINE:
                    return True, s.value
                target = s
                break
            if target is not None:
                rec = p.read(srv.slab, target.off, target.length, timeout=self.timeout)
                try:
                    return True, decode_record(rec, target, key)
                except (Unstable, Stale):
                    self.retries += 1
                    continue
            if unstable:
                self.retries += 1
                continue
            if corrupt:
                raise Corrupt("kv: server %s: a slot of bucket %d cannot be one it wrote" % (srv.addr, bucket))
            return False, None
        raise Unstable("kv: server %s: the bucket changed under %d READs" % (srv.addr, MAX_RETRIES))

    def set(self, key, value):
        """SET on every replica of key over the RPC (the client's
        certificate must be granted WRITE)."""
        key, value = bytes(key), bytes(value)
        if not 0 < len(key) <= MAX_KEY_BYTES:
            raise ValueError("kv: a key of %d bytes, want 1..%d" % (len(key), MAX_KEY_BYTES))
        body = struct.pack(">BBI", OP_SET, len(key), len(value)) + key + value
        for i in self.ring.replicas(key_hash(key), self.replicas):
            self._rpc(self.servers[i], body)

    def delete(self, key):
        """DELETE on every replica of key; False when none held it."""
        key = bytes(key)
        body = bytes([OP_DELETE, len(key)]) + key
        found = False
        for i in self.ring.replicas(key_hash(key), self.replicas):
            try:
                self._rpc(self.servers[i], body)
                found = True
            except RPCRefused as e:
                if e.kv_code != CODE_NOT_FOUND:
                    raise
        return found
