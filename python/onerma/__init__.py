"""onerma: OneRMA from Python, over libonerma (the engine's C client) with
ctypes; numpy optional.

    import onerma
    with onerma.Portal("/run/onerma/rmad.sock", "reader") as p:
        grant = p.fetch_key("owner:18515", "creds", region=0x10001)   # K_d over keyx
        data = p.read(grant, 0, 64)                                    # bytes
        sink = p.register_region(1 << 20)
        p.read(grant, 0, 1 << 20, into=sink)                           # no copy
        arr = sink.numpy()                                             # numpy over the region

The library is found through $ONERMA_LIB, the source tree's
libonerma/build, then the system's loader. docs/python.md has the rest."""

from .errors import (
    CredentialsError,
    EngineGone,
    KeyxError,
    NotFound,
    OnermaError,
    Refused,
    StatusError,
    Timeout,
)
from .keyx import Grant, KeyExchange
from .portal import Portal, Region, derive_kd
from .types import (
    DEFAULT_SOCKET,
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
)
from . import keyx  # noqa: E402  (onerma.keyx.fetch)

__version__ = "0.1.0"

__all__ = [
    "BucketLayout", "Class", "Completion", "CredentialsError", "DEFAULT_SOCKET", "EngineGone", "ErrorCode", "Grant",
    "Identity", "KEY_SIZE", "KeyExchange", "KeyxError", "MAX_OP_BYTES", "NotFound", "OnermaError", "Op", "Perm",
    "Portal", "Refused", "Region", "Remote", "Status", "StatusError", "Timeout", "derive_kd", "keyx",
]


def library():
    """The path of the libonerma this process loaded (loading it if need be)."""
    from . import _lib

    return _lib.load().path
