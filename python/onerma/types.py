"""The values of onerma.h (and of the Go packages abi and ctlmsg, which it
mirrors) as Python enums, and the small value types of the API: identities,
remote regions, completions. tests/test_unit.py checks every enum against
libonerma/include/onerma.h."""

import collections
import ctypes
import enum
import ipaddress

MAX_OP_BYTES = 4096  # the largest op (abi.MaxOpBytes)
KEY_SIZE = 16  # K_r and K_d: AES-128 keys
MAX_NAME_BYTES = 64  # a portal name: 1..64 of [A-Za-z0-9._-]
MAX_ALLOC_SLOTS = 65536
MAX_REGION_BYTES = 1 << 40
# The largest region with a bucket layout (abi.MaxLookupRegionBytes): a
# LOOKUP's bucket offset is a u32.
MAX_LOOKUP_REGION_BYTES = (1 << 32) - 1
# The largest BucketLayout.ptr_shift (abi.MaxPtrShift).
MAX_PTR_SHIFT = 32
# A LOOKUP's flag (abi.FlagLookupBucket): on a miss, the answer is the bucket.
FLAG_LOOKUP_BUCKET = 1
DEFAULT_SOCKET = "/run/onerma/rmad.sock"


class Op(enum.IntEnum):
    """Op types (enum onerma_op_type, abi.Op)."""

    READ = 1
    WRITE = 2
    REKEY = 3
    LOOKUP = 4  # two hops like a READ: one bucket scanned, one pointer followed


class Perm(enum.IntFlag):
    """Region permissions (enum onerma_perm, abi.Perm)."""

    LOCAL_READ = 1 << 0  # source of the owner's WRITE and REKEY ops
    LOCAL_WRITE = 1 << 1  # sink of the owner's READ ops
    REMOTE_READ = 1 << 2  # remote READ ops may read it
    REMOTE_WRITE = 1 << 3  # remote WRITE ops may write it
    REMOTE_REKEY = 1 << 4  # remote REKEY ops may change its key
    # remote LOOKUP ops may scan its buckets: only a region with a bucket
    # layout (Portal.register_lookup_region), so not in ALL
    REMOTE_LOOKUP = 1 << 5
    ALL = 0x1F
    ANY = 0x3F  # every bit a region may hold


class Class(enum.IntEnum):
    """Classes of service (enum onerma_class)."""

    LOW = 0
    HIGH = 1


class Status(enum.IntEnum):
    """Completion statuses (enum onerma_status, abi.Status); docs/glossary.md
    says what each means. ENGINE_GONE is the library's, never the engine's."""

    OK = 0
    REMOTE_AUTHENTICATION_FAILURE = 1
    NACK = 2
    TIMEOUT = 3
    DISPATCH_TIMEOUT = 4
    BAD_COMMAND = 16
    TOO_LARGE = 17
    BAD_SLOT = 18
    LOCAL_REGION = 19
    LOCAL_BOUNDS = 20
    LOCAL_PERMISSION = 21
    UNREACHABLE = 22
    ABORTED = 23
    ENGINE_GONE = 24
    REMOTE_REGION = 32
    REMOTE_BOUNDS = 33
    REMOTE_PERMISSION = 34
    # a LOOKUP's (docs/protocol.md, "Lookups")
    REMOTE_NOT_FOUND = 35
    REMOTE_LOOKUP_BOUNDS = 36
    REMOTE_LOOKUP_TOO_LARGE = 37


class ErrorCode(enum.IntEnum):
    """The library's own error codes (enum onerma_error); functions return
    them negated. errno values (ENOENT, ETIMEDOUT, ...) are below BASE."""

    BASE = 4096
    RING_FULL = 4097
    RING_CORRUPT = 4098
    REGION = 4099
    LENGTH = 4100
    BOUNDS = 4101
    OP = 4102
    SLOT = 4103
    ENGINE_GONE = 4104
    ZERO_KEY = 4105
    INVALID = 4106
    PROTOCOL = 4107
    BAD_REQUEST = 4108
    STATE = 4109
    SLOT_CAP = 4110
    CLASS = 4111
    NO_SLOTS = 4112
    LIMIT = 4113
    QUOTA = 4114
    NO_REGION = 4115
    RESOURCE = 4116
    UNAVAILABLE = 4117
    INTERNAL = 4118
    TOO_LARGE = 4119
    FDS_REJECTED = 4120
    ENGINE = 4121
    # The key exchange client: this process's credentials,
    CREDS_FILE = 4122
    CREDS = 4123
    CREDS_ROLE = 4124
    CREDS_EXPIRED = 4125
    # the TLS session,
    SERVER_CERT = 4126
    CERT_REFUSED = 4127
    TLS = 4128
    KX_CLOSED = 4129
    # and an owner's refusal, one per keyx.Code.
    KX_BAD_REQUEST = 4130
    KX_NO_REGION = 4131
    KX_PERMISSION = 4132
    KX_REFUSED = 4133
    KX_INTERNAL = 4134
    KX_NOT_GRANTED = 4135
    KX_ADDRESS = 4136
    KX_REVOKED = 4137
    KX_CODE = 4138


# The codes of the key exchange client, which libraries built before it
# lack.
KEYX_ERRORS = frozenset(c for c in ErrorCode if c >= ErrorCode.CREDS_FILE)

# Status and Op by a completion's byte, for the data path (a list index,
# not an enum lookup); a value onerma.h does not name stays an int.
_STATUS = list(range(256))
for _s in Status:
    _STATUS[_s.value] = _s
_OP = list(range(256))
for _o in Op:
    _OP[_o.value] = _o


def status_of(v):
    """The Status of value v; an int for a value onerma.h does not name."""
    return _STATUS[v] if 0 <= v < 256 else v


class BucketLayout(collections.namedtuple(
        "BucketLayout",
        "bucket_bytes entry_bytes tag_off tag_width ptr_off ptr_width ptr_shift len_off len_width linked")):
    """A region's bucket layout, for LOOKUPs (struct onerma_bucket_layout,
    abi.BucketLayout, whose field order it keeps). A bucket is bucket_bytes
    (1..4096) at the offset a LOOKUP names; its entries start every
    entry_bytes from its start, as many as fit whole. In an entry, the tag,
    the pointer and the length are little-endian unsigned integers of
    tag_width, ptr_width and len_width bytes (1, 2, 4 or 8) at tag_off,
    ptr_off and len_off. The pointer is an offset in the region linked (a
    region id of the same portal, or a Region), or in the bucket's own
    region when linked is 0, in units of 2^ptr_shift bytes
    (0..MAX_PTR_SHIFT; 0: bytes; an index of 64-byte aligned records
    stores offset/64: 6).
    Portal.register_lookup_region checks it (libonerma's
    onerma_bucket_layout_check) and raises OnermaError (code INVALID) with
    the rule it breaks."""

    __slots__ = ()

    def __new__(cls, bucket_bytes, entry_bytes, tag_off, tag_width, ptr_off, ptr_width, ptr_shift, len_off, len_width,
                linked=0):
        linked = getattr(linked, "id", linked)
        return super().__new__(cls, bucket_bytes, entry_bytes, tag_off, tag_width, ptr_off, ptr_width, ptr_shift,
                               len_off, len_width, linked)

    def check(self):
        """Return the layout when it is valid on its own (libonerma's
        onerma_bucket_layout_check; the engine checks it against the
        regions at registration); else raise OnermaError (code INVALID)
        naming the rule it breaks, or ValueError for a field outside
        0..2^32-1."""
        from . import _lib
        from .errors import error

        lib = _lib.load()
        err = lib.onerma_bucket_layout_check(ctypes.byref(self._c()))
        if err < 0:
            raise error(err, "BucketLayout.check")
        return self

    def _c(self):
        """The struct onerma_bucket_layout of the layout."""
        from . import _lib

        for name, v in zip(self._fields, self):
            if not isinstance(v, int) or not 0 <= v <= 0xFFFFFFFF:
                raise ValueError("onerma: bucket layout: %s %r, want an integer in 0..2^32-1" % (name, v))
        return _lib._BucketLayout(*self)

    @property
    def entries(self):
        """The number of entries in a bucket."""
        return self.bucket_bytes // self.entry_bytes

    @property
    def target_offset(self):
        """Where a LOOKUP's answer puts the target (lookup_target_offset)."""
        return lookup_target_offset(self.entry_bytes)


def lookup_target_offset(entry_bytes):
    """Where a LOOKUP's answer puts the target: the first multiple of 64 at
    or after the entry's end (onerma_lookup_target_offset)."""
    return (entry_bytes + 63) & ~63


def addr_int(addr):
    """An IPv4 address (dotted string, ipaddress.IPv4Address or int in host
    order) as the int in host order libonerma takes (10.0.0.1 = 0x0a000001)."""
    if isinstance(addr, int):
        if not 0 <= addr <= 0xFFFFFFFF:
            raise ValueError("onerma: IPv4 address %d out of range" % addr)
        return addr
    return int(ipaddress.IPv4Address(addr))


def addr_str(addr):
    """The dotted form of an IPv4 address given as an int in host order."""
    return str(ipaddress.IPv4Address(addr))


class Identity:
    """What the engine stamps on a portal's requests (onerma_identity): its
    own address and the identity it gave this process. An owner derives
    K_d for (addr, pid)."""

    __slots__ = ("addr", "pid", "uid", "gid", "name", "tenant")

    def __init__(self, addr, pid, uid=0, gid=0, name="", tenant=""):
        self.addr, self.pid, self.uid, self.gid = addr_int(addr), pid, uid, gid
        self.name, self.tenant = name, tenant

    @property
    def address(self):
        """The engine's address, dotted."""
        return addr_str(self.addr)

    def __repr__(self):
        return "Identity(addr=%r, pid=%d, uid=%d, gid=%d, name=%r, tenant=%r)" % (
            self.address, self.pid, self.uid, self.gid, self.name, self.tenant)


class Remote:
    """A remote region as ops name it: its owner's engine address, its id,
    and the K_d of this process for one op type. keyx.Grant is one; an
    owner in this process makes one with Region.remote_for.

    The key is secret: repr leaves it out."""

    __slots__ = ("addr", "region", "key", "size")

    def __init__(self, addr, region, key, size=None):
        key = bytes(key)
        if len(key) != KEY_SIZE:
            raise ValueError("onerma: a K_d is %d bytes, not %d" % (KEY_SIZE, len(key)))
        if not 0 < region <= 0xFFFFFFFF:
            raise ValueError("onerma: region id %r out of range" % (region,))
        self.addr, self.region, self.key, self.size = addr_int(addr), region, key, size

    @property
    def owner(self):
        """The owner engine's address, dotted."""
        return addr_str(self.addr)

    def __repr__(self):
        size = "" if self.size is None else ", size=%d" % self.size
        return "%s(owner=%r, region=%#x%s)" % (type(self).__name__, self.owner, self.region, size)


class Completion(collections.namedtuple("Completion", "cookie slot status op issue_delay_ns total_delay_ns length")):
    """The outcome of one op (onerma_completion): exactly one per op posted.
    A tuple (cookie, slot, status, op, issue_delay_ns, total_delay_ns,
    length) with those names.

    status is a Status (an int for a value onerma.h does not name); ok is
    status == OK; check() returns the completion when OK and raises
    StatusError (EngineGone for ENGINE_GONE) otherwise."""

    __slots__ = ()

    @property
    def ok(self):
        return self.status == 0

    def check(self):
        if self.status != 0:
            from .errors import status_error

            raise status_error(self)
        return self

    def __repr__(self):
        st = self.status.name if isinstance(self.status, Status) else self.status
        op = self.op.name if isinstance(self.op, Op) else self.op
        return "Completion(cookie=%d, slot=%d, status=%s, op=%s, length=%d, issue_delay_ns=%d, total_delay_ns=%d)" % (
            self.cookie, self.slot, st, op, self.length, self.issue_delay_ns, self.total_delay_ns)
