"""The binding to libonerma: finding the shared library and declaring each
C function's prototype, one ctypes attribute per function of onerma.h.

This module knows nothing of 1RMA beyond the C signatures; the classes of
portal.py and keyx.py give them meaning. ctypes releases the GIL for every
call, so a thread asleep in onerma_wait or a key fetch does not hold up
the others.
"""

import ctypes
import ctypes.util
import os
import threading

# The environment variable naming the shared library (a path to
# libonerma.so or libonerma.so.0); it wins over every other place.
ENV_LIB = "ONERMA_LIB"

_SONAMES = ("libonerma.so.0", "libonerma.so")


class LibraryNotFound(OSError):
    """No libonerma could be loaded; the message lists where it was looked for."""


def candidates():
    """The places libonerma is looked for, in order: $ONERMA_LIB alone when
    it is set (a library named on purpose is never replaced by another);
    else the source tree's libonerma/build (when this package runs from a
    checkout), then the system's loader (ctypes.util.find_library)."""
    env = os.environ.get(ENV_LIB)
    if env:
        return [env]
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.join(here, os.pardir, os.pardir, "libonerma", "build")
    for so in _SONAMES:
        p = os.path.normpath(os.path.join(build, so))
        if os.path.exists(p):
            out.append(p)
    found = ctypes.util.find_library("onerma")
    if found:
        out.append(found)
    return out


class _Options(ctypes.Structure):
    """struct onerma_options."""

    _fields_ = [
        ("cmd_cap", ctypes.c_uint32),
        ("cpl_cap", ctypes.c_uint32),
        ("service_class", ctypes.c_int),
        ("timeout_ms", ctypes.c_int),
        ("wait_spins", ctypes.c_int),
        ("pin_core", ctypes.c_int),
        ("core", ctypes.c_int),
    ]


class _Identity(ctypes.Structure):
    """struct onerma_identity."""

    _fields_ = [
        ("addr", ctypes.c_uint32),
        ("pid", ctypes.c_uint32),
        ("uid", ctypes.c_uint32),
        ("gid", ctypes.c_uint32),
        ("name", ctypes.c_char * 65),
        ("tenant", ctypes.c_char * 256),
    ]


class _Op(ctypes.Structure):
    """struct onerma_op. The data path packs ops with OP_FORMAT into a
    buffer of its own instead (one call instead of one per field); this
    type exists for the layout test and for onerma_op_set_grant."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("slot", ctypes.c_uint32),
        ("cookie", ctypes.c_uint64),
        ("remote_addr", ctypes.c_uint32),
        ("remote_region", ctypes.c_uint32),
        ("remote_offset", ctypes.c_uint64),
        ("key", ctypes.c_uint8 * 16),
        ("local", ctypes.c_void_p),
        ("local_offset", ctypes.c_uint64),
        ("length", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("tag", ctypes.c_uint64),
    ]


class _BucketLayout(ctypes.Structure):
    """struct onerma_bucket_layout."""

    _fields_ = [(name, ctypes.c_uint32) for name in (
        "bucket_bytes", "entry_bytes", "tag_off", "tag_width", "ptr_off", "ptr_width", "ptr_shift", "len_off",
        "len_width", "linked")]


class _Completion(ctypes.Structure):
    """struct onerma_completion."""

    _fields_ = [
        ("cookie", ctypes.c_uint64),
        ("slot", ctypes.c_uint32),
        ("status", ctypes.c_uint8),
        ("op", ctypes.c_uint8),
        ("reserved", ctypes.c_uint16),
        ("issue_delay_ns", ctypes.c_uint32),
        ("total_delay_ns", ctypes.c_uint32),
        ("length", ctypes.c_uint32),
    ]


class _Grant(ctypes.Structure):
    """struct onerma_grant (the keyx client)."""

    _fields_ = [
        ("kd", ctypes.c_uint8 * 16),
        ("region", ctypes.c_uint32),
        ("op", ctypes.c_uint32),
        ("owner_addr", ctypes.c_uint32),
        ("size", ctypes.c_uint64),
    ]


# struct onerma_op and struct onerma_completion as struct module formats
# (little-endian x86-64 and arm64 layouts: the C test in tests/ checks them
# against the compiler's offsetof): type, slot, cookie, remote_addr,
# remote_region, remote_offset, key, local (a pointer), local_offset,
# length, flags, tag.
OP_FORMAT = "<IIQIIQ16sQQIIQ"
OP_SIZE = 80
# cookie, slot, status, op, reserved, issue_delay_ns, total_delay_ns,
# length, padding.
COMPLETION_FORMAT = "<QIBBHIII4x"
COMPLETION_SIZE = 32

_P = ctypes.c_void_p
_I = ctypes.c_int
_U32 = ctypes.c_uint32
_U64 = ctypes.c_uint64
_S = ctypes.c_char_p
_KEY = ctypes.c_char_p  # 16 bytes, in or out (a ctypes buffer for out)

# name: (restype, argtypes). Every function of onerma.h the package calls.
_PROTOS = {
    "onerma_dial": (_I, [_S, _S, ctypes.POINTER(_Options), ctypes.POINTER(_P)]),
    "onerma_redial": (_I, [_P, _I, ctypes.POINTER(_P)]),
    "onerma_close": (_I, [_P]),
    "onerma_portal_identity": (None, [_P, ctypes.POINTER(_Identity)]),
    "onerma_portal_class": (_I, [_P]),
    "onerma_portal_core": (_I, [_P]),
    "onerma_portal_max_slots": (_I, [_P]),
    "onerma_portal_hugetlb": (_I, [_P]),
    "onerma_portal_doorbell": (_I, [_P]),
    "onerma_portal_summary": (_I, [_P]),
    "onerma_portal_cmd_cap": (_U32, [_P]),
    "onerma_portal_cpl_cap": (_U32, [_P]),
    "onerma_gone": (_I, [_P]),
    "onerma_moderate": (_I, [_P, _U32, _U32]),
    "onerma_alloc_slots": (_I, [_P, _U32, ctypes.POINTER(_U32)]),
    "onerma_register_region": (_I, [_P, _U64, ctypes.c_uint, ctypes.POINTER(_P)]),
    "onerma_register_region_key": (_I, [_P, _U64, ctypes.c_uint, _KEY, ctypes.POINTER(_P)]),
    "onerma_register_lookup_region": (_I, [_P, _U64, ctypes.c_uint, ctypes.POINTER(_BucketLayout), ctypes.POINTER(_P)]),
    "onerma_register_lookup_region_key": (_I, [_P, _U64, ctypes.c_uint, ctypes.POINTER(_BucketLayout), _KEY,
                                               ctypes.POINTER(_P)]),
    "onerma_bucket_layout_check": (_I, [ctypes.POINTER(_BucketLayout)]),
    "onerma_lookup_target_offset": (_U32, [_U32]),
    "onerma_region_layout": (_I, [_P, ctypes.POINTER(_BucketLayout)]),
    "onerma_deregister_region": (_I, [_P, _P]),
    "onerma_rekey": (_I, [_P, _P, _KEY]),
    "onerma_region_id": (_U32, [_P]),
    "onerma_region_addr": (_P, [_P]),
    "onerma_region_size": (_U64, [_P]),
    "onerma_region_perm": (ctypes.c_uint, [_P]),
    "onerma_region_hugetlb": (_I, [_P]),
    "onerma_region_key": (None, [_P, _KEY]),
    "onerma_region_derive_kd": (_I, [_P, _U32, _U32, ctypes.c_uint, _KEY]),
    "onerma_post": (_I, [_P, _P]),
    "onerma_flush": (None, [_P]),
    "onerma_submit": (_I, [_P, _P]),
    "onerma_staged": (_U32, [_P]),
    "onerma_posted": (_U32, [_P]),
    "onerma_poll": (_I, [_P, _P, _I]),
    "onerma_wait": (_I, [_P, _P, _I, _I]),
    "onerma_derive_kd": (_I, [_KEY, _U32, _U32, ctypes.c_uint, _KEY]),
    "onerma_strerror": (_S, [_I]),
    "onerma_status_str": (_S, [_I]),
    "onerma_errmsg": (_S, []),
    "onerma_errquota": (_S, []),
}

# The keyx client (onerma_keyx_*): bound when the library has it.
_KEYX_PROTOS = {
    "onerma_keyx_check_creds": (_I, [_S]),
    "onerma_keyx_dial": (_I, [_S, _S, _I, ctypes.POINTER(_P)]),
    "onerma_keyx_fetch": (_I, [_P, _U32, _I, _U32, _U32, _I, ctypes.POINTER(_Grant)]),
    "onerma_keyx_peer_name": (None, [_P, ctypes.c_char_p, ctypes.c_size_t]),
    "onerma_keyx_close": (None, [_P]),
    "onerma_grant_zero": (None, [ctypes.POINTER(_Grant)]),
}


class Library:
    """A loaded libonerma with its prototypes declared.

    path is the file loaded; has_keyx tells whether it has the keyx client
    (onerma_keyx_*)."""

    def __init__(self, path):
        self.path = path
        self.cdll = ctypes.CDLL(path)
        for name, (res, args) in _PROTOS.items():
            f = getattr(self.cdll, name)
            f.restype, f.argtypes = res, args
            setattr(self, name, f)
        self.has_keyx = all(hasattr(self.cdll, n) for n in _KEYX_PROTOS)
        if self.has_keyx:
            for name, (res, args) in _KEYX_PROTOS.items():
                f = getattr(self.cdll, name)
                f.restype, f.argtypes = res, args
                setattr(self, name, f)

    def errmsg(self):
        """The calling thread's detail of its last failed call."""
        return self.onerma_errmsg().decode("utf-8", "replace")

    def strerror(self, err):
        return self.onerma_strerror(err).decode("utf-8", "replace")


_lock = threading.Lock()
_lib = None


def load():
    """The process's Library, loaded on first use from the first of
    candidates() that loads. Raises LibraryNotFound."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            tried = []
            for c in candidates():
                try:
                    _lib = Library(c)
                    break
                except OSError as e:
                    tried.append("%s: %s" % (c, e))
            else:
                where = "; ".join(tried) if tried else "nothing found"
                raise LibraryNotFound(
                    "onerma: cannot load libonerma (%s). Set %s to its path, build it "
                    "(make -C libonerma) or install it (make -C libonerma install)" % (where, ENV_LIB)
                )
    return _lib
