/*
 * errors.c - error names, status names and the per-thread detail of the
 * last failed control call.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char errmsg[640];
static _Thread_local char errquota[32];

int onr_fail(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof errmsg, fmt, ap);
	va_end(ap);
	errquota[0] = 0;
	return err;
}

void onr_set_quota(const char *quota) { snprintf(errquota, sizeof errquota, "%s", quota); }

const char *onerma_errmsg(void) { return errmsg; }

const char *onerma_errquota(void) { return errquota; }

static const char *const enames[ONERMA_E_MAX - ONERMA_E_BASE] = {
	[ONERMA_E_RING_FULL - ONERMA_E_BASE] = "command ring full",
	[ONERMA_E_RING_CORRUPT - ONERMA_E_BASE] = "ring index corrupt",
	[ONERMA_E_REGION - ONERMA_E_BASE] = "local region not registered with this portal",
	[ONERMA_E_LENGTH - ONERMA_E_BASE] = "op length must be 1..4096 bytes (REKEY: 16)",
	[ONERMA_E_BOUNDS - ONERMA_E_BASE] = "local offset+length outside the region",
	[ONERMA_E_OP - ONERMA_E_BASE] = "op type must be READ, WRITE, REKEY or LOOKUP (REKEY: at remote offset 0; LOOKUP: a bucket offset below 2^32; a tag or flags only for a LOOKUP)",
	[ONERMA_E_SLOT - ONERMA_E_BASE] = "slot not owned, already free, or none free",
	[ONERMA_E_ENGINE_GONE - ONERMA_E_BASE] = "the engine is gone",
	[ONERMA_E_ZERO_KEY - ONERMA_E_BASE] = "region key is all zero",
	[ONERMA_E_INVALID - ONERMA_E_BASE] = "invalid argument",
	[ONERMA_E_PROTOCOL - ONERMA_E_BASE] = "the engine (or a key exchange owner) broke the protocol",
	[ONERMA_E_BAD_REQUEST - ONERMA_E_BASE] = "the engine rejected the request",
	[ONERMA_E_STATE - ONERMA_E_BASE] = "the request is not valid in the portal's state",
	[ONERMA_E_SLOT_CAP - ONERMA_E_BASE] = "over the application's slot cap",
	[ONERMA_E_CLASS - ONERMA_E_BASE] = "class of service not granted to this application",
	[ONERMA_E_NO_SLOTS - ONERMA_E_BASE] = "the engine has no free slots",
	[ONERMA_E_LIMIT - ONERMA_E_BASE] = "over an engine limit",
	[ONERMA_E_QUOTA - ONERMA_E_BASE] = "over a quota of this tenant",
	[ONERMA_E_NO_REGION - ONERMA_E_BASE] = "region not registered by this portal",
	[ONERMA_E_RESOURCE - ONERMA_E_BASE] = "the engine is out of resources",
	[ONERMA_E_UNAVAILABLE - ONERMA_E_BASE] = "the engine is shutting down",
	[ONERMA_E_INTERNAL - ONERMA_E_BASE] = "internal error in the engine",
	[ONERMA_E_TOO_LARGE - ONERMA_E_BASE] = "request too large for the engine",
	[ONERMA_E_FDS_REJECTED - ONERMA_E_BASE] = "the engine rejected file descriptors on a request",
	[ONERMA_E_ENGINE - ONERMA_E_BASE] = "the engine refused the request",
	[ONERMA_E_CREDS_FILE - ONERMA_E_BASE] = "keyx credentials file unsafe (its mode, owner or directory)",
	[ONERMA_E_CREDS - ONERMA_E_BASE] = "keyx credentials malformed",
	[ONERMA_E_CREDS_ROLE - ONERMA_E_BASE] = "keyx credentials of the wrong role (not a client certificate)",
	[ONERMA_E_CREDS_EXPIRED - ONERMA_E_BASE] = "keyx credentials expired or not yet valid",
	[ONERMA_E_SERVER_CERT - ONERMA_E_BASE] = "the owner's certificate failed verification",
	[ONERMA_E_CERT_REFUSED - ONERMA_E_BASE] = "the owner refused this client's certificate",
	[ONERMA_E_TLS - ONERMA_E_BASE] = "TLS failure in the key exchange",
	[ONERMA_E_KX_CLOSED - ONERMA_E_BASE] = "the key exchange connection is closed or failed: dial again",
	[ONERMA_E_KX_BAD_REQUEST - ONERMA_E_BASE] = "the owner refused: bad request",
	[ONERMA_E_KX_NO_REGION - ONERMA_E_BASE] = "the owner refused: unknown region",
	[ONERMA_E_KX_PERMISSION - ONERMA_E_BASE] = "the owner refused: permission denied (the region does not allow the op remotely)",
	[ONERMA_E_KX_REFUSED - ONERMA_E_BASE] = "the owner refused: refused by its policy",
	[ONERMA_E_KX_INTERNAL - ONERMA_E_BASE] = "the owner refused: internal error",
	[ONERMA_E_KX_NOT_GRANTED - ONERMA_E_BASE] = "the owner refused: not granted (no permit covers the region and op)",
	[ONERMA_E_KX_ADDRESS - ONERMA_E_BASE] = "the owner refused: address not granted",
	[ONERMA_E_KX_REVOKED - ONERMA_E_BASE] = "the owner refused: certificate revoked",
	[ONERMA_E_KX_CODE - ONERMA_E_BASE] = "the owner refused with a code this library does not know",
};

const char *onerma_strerror(int err)
{
	if (err < 0)
		err = -err;
	if (err == 0)
		return "success";
	if (err > ONERMA_E_BASE && err < ONERMA_E_MAX)
		return enames[err - ONERMA_E_BASE];
	if (err < ONERMA_E_BASE)
		return strerror(err);
	return "unknown error";
}

static const char *const snames[] = {
	[ONERMA_STATUS_OK] = "OK",
	[ONERMA_STATUS_REMOTE_AUTHENTICATION_FAILURE] = "REMOTE_AUTHENTICATION_FAILURE",
	[ONERMA_STATUS_NACK] = "NACK",
	[ONERMA_STATUS_TIMEOUT] = "TIMEOUT",
	[ONERMA_STATUS_DISPATCH_TIMEOUT] = "DISPATCH_TIMEOUT",
	[ONERMA_STATUS_BAD_COMMAND] = "BAD_COMMAND",
	[ONERMA_STATUS_TOO_LARGE] = "TOO_LARGE",
	[ONERMA_STATUS_BAD_SLOT] = "BAD_SLOT",
	[ONERMA_STATUS_LOCAL_REGION] = "LOCAL_REGION",
	[ONERMA_STATUS_LOCAL_BOUNDS] = "LOCAL_BOUNDS",
	[ONERMA_STATUS_LOCAL_PERMISSION] = "LOCAL_PERMISSION",
	[ONERMA_STATUS_UNREACHABLE] = "UNREACHABLE",
	[ONERMA_STATUS_ABORTED] = "ABORTED",
	[ONERMA_STATUS_ENGINE_GONE] = "ENGINE_GONE",
	[ONERMA_STATUS_REMOTE_REGION] = "REMOTE_REGION",
	[ONERMA_STATUS_REMOTE_BOUNDS] = "REMOTE_BOUNDS",
	[ONERMA_STATUS_REMOTE_PERMISSION] = "REMOTE_PERMISSION",
	[ONERMA_STATUS_REMOTE_NOT_FOUND] = "REMOTE_NOT_FOUND",
	[ONERMA_STATUS_REMOTE_LOOKUP_BOUNDS] = "REMOTE_LOOKUP_BOUNDS",
	[ONERMA_STATUS_REMOTE_LOOKUP_TOO_LARGE] = "REMOTE_LOOKUP_TOO_LARGE",
};

const char *onerma_status_str(int status)
{
	if (status >= 0 && (size_t)status < sizeof snames / sizeof snames[0] && snames[status])
		return snames[status];
	return "STATUS_UNKNOWN";
}
