"""Fetching K_d from a region's owner over its key exchange (keyx: TLS 1.3
with mutual authentication, docs/protocol.md), through libonerma's keyx
client (onerma_keyx_*).

    grant = onerma.keyx.fetch("owner.example:18515", "/etc/onerma/creds",
                              portal.identity, region=0x10001, op=onerma.Op.READ)
    data = portal.read(grant, 0, 64)

The credentials are the directory `rmactl creds` writes (client.pem: the
CA's certificate, the client's certificate and its private key), checked
as Go's keyx.LoadClient checks them: a file group or others may read, one
another user owns, server credentials, an expired or foreign certificate
are each refused with their reason (CredentialsError, Refused)."""

import ctypes

from . import _lib
from .errors import KeyxError, OnermaError, error
from .types import ErrorCode, Identity, Op, Remote


class Grant(Remote):
    """An owner's grant (onerma_grant): the K_d of one request (key), the
    region's id (region) and size (size), the op type it is for (op), and
    the owner engine's address (addr, owner) where ops go. Pass it to
    Portal.read, write and post_* as their target. The key is secret:
    repr leaves it out."""

    __slots__ = ("op",)

    def __init__(self, addr, region, key, size, op):
        super().__init__(addr, region, key, size)
        self.op = Op(op)

    def __repr__(self):
        return "Grant(owner=%r, region=%#x, size=%d, op=%s)" % (self.owner, self.region, self.size, self.op.name)


def _lib_keyx():
    lib = _lib.load()
    if not lib.has_keyx:
        raise OnermaError("onerma: %s has no key exchange client (onerma_keyx_*): build a newer libonerma" % lib.path,
                          ErrorCode.INVALID)
    return lib


def _ms(timeout):
    """None: the library's default (30 s); else seconds, at least 1 ms."""
    if timeout is None:
        return 0
    if timeout < 0:
        raise ValueError("onerma: timeout %r: want seconds >= 0, or None" % (timeout,))
    return max(1, int(timeout * 1000))


def check_creds(creds):
    """Load and check the client credentials of directory creds as a dial
    would, without dialling; raises CredentialsError saying why they are
    unusable."""
    lib = _lib_keyx()
    err = lib.onerma_keyx_check_creds(str(creds).encode())
    if err < 0:
        raise error(err, "credentials %s" % creds, keyx=True)


class KeyExchange:
    """A connection to one owner's key exchange: ``KeyExchange(addr,
    creds)`` loads the client credentials of directory creds and completes
    the TLS 1.3 handshake with the owner at addr ("host:port"), verifying
    its certificate against the credentials' CA and host. One request at a
    time; after a failure that leaves it unusable (KX_CLOSED, TLS, a
    bad-request, revoked or internal refusal), close it and dial again.
    A context manager."""

    def __init__(self, addr, creds, timeout=None):
        self._lib = _lib_keyx()
        self._addr = addr
        h = ctypes.c_void_p()
        err = self._lib.onerma_keyx_dial(addr.encode(), str(creds).encode(), _ms(timeout), ctypes.byref(h))
        if err < 0:
            raise error(err, "keyx dial %s" % addr, keyx=True)
        self._h = h

    def fetch(self, identity, region, op=Op.READ, timeout=None):
        """The K_d for ops of type op on region by the process behind
        identity (a Portal, or its Identity): a Grant. Raises Refused with
        the owner's reason (detail: its message), CredentialsError, or
        KeyxError."""
        if self._h is None:
            raise KeyxError("onerma: keyx: the connection is closed", ErrorCode.KX_CLOSED)
        if not isinstance(identity, Identity):
            identity = identity.identity
        g = _lib._Grant()
        err = self._lib.onerma_keyx_fetch(self._h, region, int(op), identity.addr, identity.pid, _ms(timeout),
                                          ctypes.byref(g))
        if err < 0:
            raise error(err, "keyx fetch %s region %#x from %s" % (Op(op).name, region, self._addr), keyx=True)
        try:
            return Grant(g.owner_addr, g.region, bytes(g.kd), g.size, g.op)
        finally:
            self._lib.onerma_grant_zero(ctypes.byref(g))

    @property
    def peer_name(self):
        """The common name of the owner's certificate."""
        buf = ctypes.create_string_buffer(256)
        self._lib.onerma_keyx_peer_name(self._h, buf, len(buf))
        return buf.value.decode()

    def close(self):
        h, self._h = self._h, None
        if h is not None:
            self._lib.onerma_keyx_close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) is not None:
            self.close()


def fetch(addr, creds, identity, region, op=Op.READ, timeout=None):
    """Dial the owner's key exchange at addr with the client credentials of
    directory creds, fetch the K_d of identity (a Portal or its Identity)
    for op on region, and close: a Grant."""
    with KeyExchange(addr, creds, timeout) as kx:
        return kx.fetch(identity, region, op, timeout)
