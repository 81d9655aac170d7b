"""The exceptions of the package: each carries what failed, as the library
or the engine said it.

    OnermaError                 every failure; .code is the library's error
     |                          code (an ErrorCode, or an errno value)
     +- StatusError             an op completed with a status other than OK
     |   +- EngineGone          the engine went away (status ENGINE_GONE, or
     |   |                      a call on a portal whose engine is gone)
     |   +- NotFound            a LOOKUP found no entry with its tag
     |                          (status REMOTE_NOT_FOUND)
     +- Timeout                 a wait ended before its completion (also a
     |                          TimeoutError)
     +- KeyxError               the key exchange failed
         +- CredentialsError    this process's credentials are unusable
         +- Refused             the region's owner refused the request
"""

import errno as _errno

from .types import ErrorCode, Status, status_of


class OnermaError(Exception):
    """A failure of libonerma or of the engine behind it.

    code is the library's error code, positive: an ErrorCode (the library's
    and the engine's own, ErrorCode.ENGINE_GONE, ErrorCode.QUOTA, ...) or an
    errno value (errno.ENOENT: no engine socket, ...); errno is the latter
    or None. detail is the engine's or the library's own message for a
    failed control call (onerma_errmsg), quota the quota a QUOTA refusal
    names."""

    def __init__(self, message, code=0, detail="", quota=""):
        super().__init__(message)
        if code >= ErrorCode.BASE:
            try:
                code = ErrorCode(code)
            except ValueError:
                pass
        self.code = code
        self.detail = detail
        self.quota = quota

    @property
    def errno(self):
        return self.code if 0 < self.code < ErrorCode.BASE else None


class StatusError(OnermaError):
    """An op completed with a status other than OK; status is its Status and
    completion the Completion (None when the op never got one: a call on a
    portal whose engine is gone)."""

    def __init__(self, message, status, completion=None, code=0):
        super().__init__(message, code)
        self.status = status_of(int(status))
        self.completion = completion


class EngineGone(StatusError):
    """The engine went away (it exited, was killed or restarted): every op
    posted and not completed ends with it, and every call on the portal
    raises it from then on. Portal.redial opens a new portal."""

    def __init__(self, message, completion=None):
        super().__init__(message, Status.ENGINE_GONE, completion, ErrorCode.ENGINE_GONE)


class NotFound(StatusError):
    """A LOOKUP found no entry with its tag in the bucket (status
    REMOTE_NOT_FOUND). bucket is the bucket's bytes when the op asked for
    them (Portal.lookup's bucket=True) and they fit its length, else None."""

    def __init__(self, message, completion=None):
        super().__init__(message, Status.REMOTE_NOT_FOUND, completion)
        self.bucket = None


class Timeout(OnermaError, TimeoutError):
    """A wait ended before its op completed (the op is still in flight: its
    completion comes with a later poll or wait)."""


class KeyxError(OnermaError):
    """The key exchange with a region's owner failed. reason names why
    (onerma_strerror of the code); detail holds the owner's or the library's
    message."""

    @property
    def reason(self):
        from . import _lib

        return _lib.load().strerror(int(self.code))


class CredentialsError(KeyxError):
    """This process's credentials are unusable: a loose mode or a foreign
    owner (CREDS_FILE), a malformed bundle (CREDS), server credentials used
    as a client's (CREDS_ROLE), an expired or not yet valid certificate
    (CREDS_EXPIRED), or none at the path (ENOENT)."""


class Refused(KeyxError):
    """The region's owner refused: its certificate check (CERT_REFUSED: a
    foreign CA, an expired certificate) or its grants (KX_NOT_GRANTED,
    KX_REVOKED, KX_NO_REGION, KX_PERMISSION, KX_ADDRESS, KX_REFUSED, ...)."""


_CREDS = frozenset([ErrorCode.CREDS_FILE, ErrorCode.CREDS, ErrorCode.CREDS_ROLE, ErrorCode.CREDS_EXPIRED])
_REFUSED = frozenset(c for c in ErrorCode if c.name.startswith("KX_") and c != ErrorCode.KX_CLOSED) | {
    ErrorCode.CERT_REFUSED}


def error(err, what, detail=True, keyx=False):
    """The exception for libonerma's return value err (negative) of the call
    named what; detail: include the calling thread's onerma_errmsg (for
    control calls only: the data path leaves it alone)."""
    from . import _lib

    lib = _lib.load()
    code = -err
    msg = "onerma: %s: %s" % (what, lib.strerror(code))
    d = lib.errmsg() if detail else ""
    if d:
        msg += " (%s)" % d
    if code == ErrorCode.ENGINE_GONE:
        e = EngineGone(msg)
        e.detail = d
        return e
    if code == _errno.ETIMEDOUT:
        return Timeout(msg, code, d)
    if keyx:
        cls = KeyxError
        if code in _CREDS or (code == _errno.ENOENT):
            cls = CredentialsError
        elif code in _REFUSED:
            cls = Refused
        return cls(msg, code, d)
    quota = lib.onerma_errquota().decode() if code == ErrorCode.QUOTA else ""
    return OnermaError(msg, code, d, quota)


def status_error(c, what=None):
    """The exception for Completion c, whose status is not OK; what names
    the op (default: its type and cookie)."""
    st = getattr(c.status, "name", c.status)
    if what is None:
        what = "%s (cookie %d)" % (getattr(c.op, "name", c.op), c.cookie)
    msg = "onerma: %s completed %s" % (what, st)
    if c.status == Status.ENGINE_GONE:
        return EngineGone(msg, c)
    if c.status == Status.REMOTE_NOT_FOUND:
        return NotFound(msg, c)
    return StatusError(msg, c.status, c)
