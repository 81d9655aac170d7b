/*
 * onerma.h - libonerma, the native C client of a OneRMA engine (rmad).
 *
 * libonerma is to C and C++ what package portal is to Go: it opens a
 * CommandPortal on the engine (a control connection on the engine's unix
 * socket plus one shared-memory segment holding a command ring and a
 * completion ring), registers regions, posts READ, WRITE, REKEY and LOOKUP
 * ops and reads their completions. It speaks the protocol of docs/protocol.md, byte
 * for byte the one package portal speaks, and needs no Go in the process.
 *
 * One op, from dial to its completion:
 *
 *	struct onerma_portal *p;
 *	struct onerma_region *sink;
 *	uint32_t slot;
 *	struct onerma_completion c;
 *	onerma_dial(ONERMA_DEFAULT_SOCKET, "kv-client", NULL, &p);
 *	onerma_alloc_slots(p, 32, NULL);
 *	onerma_register_region(p, 1 << 20, ONERMA_PERM_LOCAL_WRITE, &sink);
 *	onerma_slot_take(p, &slot);
 *	struct onerma_op op = {0};
 *	op.type = ONERMA_OP_READ; op.slot = slot; op.cookie = 1;
 *	op.remote_addr = server; op.remote_region = region;
 *	memcpy(op.key, kd, ONERMA_KEY_SIZE);    // K_d from the region's owner
 *	op.local = sink; op.length = 4096;
 *	onerma_post(p, &op);                    // staged
 *	onerma_flush(p);                        // one store publishes every staged op
 *	onerma_wait(p, &c, 1, 1000);            // or onerma_poll, which never blocks
 *	onerma_slot_release(p, c.slot);         // after reading c.status
 *
 * Errors. Every function that can fail returns 0 (or a count) on success
 * and a negative code on failure: -errno for a failed system call (-ENOENT:
 * no engine socket, -ECONNREFUSED, -ENOMEM, -ETIMEDOUT, ...) and
 * -ONERMA_E_* for the library's and the engine's own (onerma_strerror names
 * both). An engine refusal maps its ctlmsg code to one ONERMA_E_* each,
 * a key exchange owner's refusal its keyx code to one ONERMA_E_KX_* each;
 * onerma_errmsg() returns the engine's or the owner's own message (or the
 * library's detail) for the last failed control call of the calling
 * thread.
 *
 * Hot path. onerma_post, onerma_submit, onerma_flush, onerma_poll,
 * onerma_slot_take and onerma_slot_release make no system call, take no
 * lock and allocate nothing: one atomic load of the engine-gone flag per
 * call, plain stores into the ring, one release store per flush.
 * onerma_wait spins, then sleeps in poll(2) on the completion doorbell.
 *
 * Thread safety, per object (as package portal states it):
 *  - struct onerma_portal: not safe for concurrent use. Use it from one
 *    thread, or serialise every call on it yourself (the rings are single
 *    producer, single consumer). onerma_gone may be called from any thread.
 *    A portal owns one library thread, which sleeps in poll(2) on a
 *    duplicate of the control connection and only ever sets the portal's
 *    engine-gone flag and rings its doorbell.
 *  - struct onerma_region: belongs to its portal's thread, except
 *    onerma_region_key and onerma_region_derive_kd, which any thread may
 *    call at any time, also while onerma_rekey runs.
 *  - struct onerma_keyx: one request at a time; use it from one thread,
 *    or dial one per thread (its own TLS session).
 *  - Functions of no object (onerma_derive_kd, onerma_strerror,
 *    onerma_status_str, onerma_addr_*) are safe from any thread;
 *    onerma_errmsg is per thread.
 *
 * When the engine goes away (it exits, is killed or restarts), the kernel
 * closes its control connections; the portal's thread sees the hang-up,
 * sets the flag and rings the doorbell. From then on onerma_poll and
 * onerma_wait return the completions the engine wrote before it went, then
 * one completion with ONERMA_STATUS_ENGINE_GONE for every other op posted
 * (flushed or only staged), and then -ONERMA_E_ENGINE_GONE on every call.
 * onerma_redial opens a new portal on the same socket.
 *
 * Memory ordering of the rings (docs/protocol.md has the whole protocol):
 * the application stores the command ring's producer index with release
 * after writing the commands, and loads its consumer index with acquire;
 * it loads the completion ring's producer index with acquire before reading
 * completions and stores its consumer index with release after copying
 * them out. The doorbell's arm word is stored and the ring re-checked with
 * sequentially consistent atomics, as the engine swaps it.
 *
 * The header compiles as C (C99 and later) and C++ (C++11 and later).
 */
#ifndef ONERMA_H
#define ONERMA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ONERMA_API __attribute__((visibility("default")))
#else
#define ONERMA_API
#endif

/* Library version. */
#define ONERMA_VERSION_MAJOR 0
#define ONERMA_VERSION_MINOR 1
#define ONERMA_VERSION_PATCH 0

/* The control protocol version this library speaks (ctlmsg.Version) and
 * the portal segment layout version it maps (abi.SegmentVersion). */
#define ONERMA_PROTOCOL_VERSION 1
#define ONERMA_SEGMENT_VERSION 1

/* The engine's control socket unless its configuration names another. */
#define ONERMA_DEFAULT_SOCKET "/run/onerma/rmad.sock"

#define ONERMA_MAX_OP_BYTES 4096 /* the largest op (abi.MaxOpBytes) */
#define ONERMA_KEY_SIZE 16       /* K_r and K_d: AES-128 keys */
#define ONERMA_MAX_NAME_BYTES 64 /* a portal name: 1..64 of [A-Za-z0-9._-] */
#define ONERMA_MAX_ALLOC_SLOTS 65536       /* one onerma_alloc_slots call */
#define ONERMA_MAX_RING_CAP 65536          /* onerma_options.cmd_cap, cpl_cap */
#define ONERMA_MAX_REGION_BYTES (1ULL << 40)
#define ONERMA_MAX_CORES 64
#define ONERMA_MAX_MODERATION_US 1000 /* onerma_moderate's period_us */
/* The largest region with a bucket layout (abi.MaxLookupRegionBytes): a
 * LOOKUP's bucket offset is a u32. */
#define ONERMA_MAX_LOOKUP_REGION_BYTES 0xffffffffULL
/* The largest onerma_bucket_layout.ptr_shift (abi.MaxPtrShift). */
#define ONERMA_MAX_PTR_SHIFT 32
/* onerma_op.flags of a LOOKUP (abi.FlagLookupBucket): when no entry
 * matches, the answer is the bucket (status REMOTE_NOT_FOUND). */
#define ONERMA_FLAG_LOOKUP_BUCKET 1

/* Op types (abi.Op). */
enum onerma_op_type {
	ONERMA_OP_READ = 1,  /* two hops: request, responses */
	ONERMA_OP_WRITE = 2, /* four hops: the serving engine pulls the data */
	ONERMA_OP_REKEY = 3, /* installs a region key; four hops like a WRITE */
	ONERMA_OP_LOOKUP = 4 /* two hops like a READ: one bucket scanned, one pointer followed */
};

/* Region permissions (abi.Perm). */
enum onerma_perm {
	ONERMA_PERM_LOCAL_READ = 1 << 0,   /* source of the owner's WRITE and REKEY ops */
	ONERMA_PERM_LOCAL_WRITE = 1 << 1,  /* sink of the owner's READ ops */
	ONERMA_PERM_REMOTE_READ = 1 << 2,  /* remote READ ops may read it */
	ONERMA_PERM_REMOTE_WRITE = 1 << 3, /* remote WRITE ops may write it */
	ONERMA_PERM_REMOTE_REKEY = 1 << 4, /* remote REKEY ops may change its key */
	/* remote LOOKUP ops may scan its buckets and follow their pointers:
	 * only a region with a bucket layout (onerma_register_lookup_region),
	 * so not in ONERMA_PERM_ALL */
	ONERMA_PERM_REMOTE_LOOKUP = 1 << 5,
	ONERMA_PERM_ALL = 0x1f,
	ONERMA_PERM_ANY = 0x3f /* every bit a region may hold */
};

/* Classes of service (abi.Class). */
enum onerma_class {
	ONERMA_CLASS_LOW = 0, /* best effort (the default) */
	ONERMA_CLASS_HIGH = 1 /* served first, without starving the low class */
};

/* Completion statuses (abi.Status; docs/glossary.md says what each means). */
enum onerma_status {
	ONERMA_STATUS_OK = 0,
	ONERMA_STATUS_REMOTE_AUTHENTICATION_FAILURE = 1,
	ONERMA_STATUS_NACK = 2,
	ONERMA_STATUS_TIMEOUT = 3,
	ONERMA_STATUS_DISPATCH_TIMEOUT = 4,
	ONERMA_STATUS_BAD_COMMAND = 16,
	ONERMA_STATUS_TOO_LARGE = 17,
	ONERMA_STATUS_BAD_SLOT = 18,
	ONERMA_STATUS_LOCAL_REGION = 19,
	ONERMA_STATUS_LOCAL_BOUNDS = 20,
	ONERMA_STATUS_LOCAL_PERMISSION = 21,
	ONERMA_STATUS_UNREACHABLE = 22,
	ONERMA_STATUS_ABORTED = 23,
	ONERMA_STATUS_ENGINE_GONE = 24, /* written by the library, never the engine */
	ONERMA_STATUS_REMOTE_REGION = 32,
	ONERMA_STATUS_REMOTE_BOUNDS = 33,
	ONERMA_STATUS_REMOTE_PERMISSION = 34,
	/* a LOOKUP's (docs/protocol.md, "Lookups") */
	ONERMA_STATUS_REMOTE_NOT_FOUND = 35,
	ONERMA_STATUS_REMOTE_LOOKUP_BOUNDS = 36,
	ONERMA_STATUS_REMOTE_LOOKUP_TOO_LARGE = 37
};

/* The library's error codes, returned negated (-ONERMA_E_RING_FULL). They
 * start above every errno value. */
enum onerma_error {
	ONERMA_E_BASE = 4096,
	/* Data path (package portal's Err* of the same names). */
	ONERMA_E_RING_FULL,    /* the command ring has no free entry: flush, poll, retry */
	ONERMA_E_RING_CORRUPT, /* the engine wrote an impossible ring index */
	ONERMA_E_REGION,       /* the local region is not this portal's */
	ONERMA_E_LENGTH,       /* length 0 or above 4096 (REKEY: neither 0 nor 16) */
	ONERMA_E_BOUNDS,       /* local offset + length outside the local region */
	ONERMA_E_OP,           /* type not READ/WRITE/REKEY/LOOKUP, a REKEY at a remote offset, a LOOKUP's
				  bucket offset above 2^32-1, a tag or flags on another op */
	ONERMA_E_SLOT,         /* release of a slot not owned or already free; or no free slot */
	ONERMA_E_ENGINE_GONE,  /* the engine went away: redial */
	ONERMA_E_ZERO_KEY,     /* a region key of all zero bytes */
	ONERMA_E_INVALID,      /* an argument out of its range (onerma_errmsg says which) */
	ONERMA_E_PROTOCOL,     /* the engine's reply or segment, or a keyx reply, broke the protocol */
	/* Engine refusals, one per ctlmsg code. */
	ONERMA_E_BAD_REQUEST,  /* bad_request: the engine rejected the request */
	ONERMA_E_STATE,        /* state: not valid now */
	ONERMA_E_SLOT_CAP,     /* slot_cap: over the application's slot cap */
	ONERMA_E_CLASS,        /* class: the class asked for is not granted */
	ONERMA_E_NO_SLOTS,     /* no_slots: the engine has no free slots */
	ONERMA_E_LIMIT,        /* limit: another policy limit */
	ONERMA_E_QUOTA,        /* quota: over a tenant quota (onerma_errquota names it) */
	ONERMA_E_NO_REGION,    /* no_region: not a region of this portal */
	ONERMA_E_RESOURCE,     /* resource: the engine is out of memory, fds or table entries */
	ONERMA_E_UNAVAILABLE,  /* unavailable: the engine is shutting down */
	ONERMA_E_INTERNAL,     /* internal: a bug or an unexpected error in the engine */
	ONERMA_E_TOO_LARGE,    /* too_large: the request datagram was too long */
	ONERMA_E_FDS_REJECTED, /* fds_rejected: the request carried file descriptors */
	ONERMA_E_ENGINE,       /* a code this library does not know */
	/* Key exchange (onerma_keyx_*): this process's credentials. */
	ONERMA_E_CREDS_FILE,    /* a credentials file is unsafe: not a regular file, group or others
				 * may read or write it, another user owns it, or its directory is
				 * writable by others */
	ONERMA_E_CREDS,         /* a credentials bundle is malformed (not CA cert, cert, key) */
	ONERMA_E_CREDS_ROLE,    /* server credentials used as a client's (no client-auth usage) */
	ONERMA_E_CREDS_EXPIRED, /* the certificate or its CA expired, or is not yet valid */
	/* Key exchange: the TLS session. */
	ONERMA_E_SERVER_CERT,   /* the owner's certificate: not from the credentials' CA, not
				 * naming the host dialled, expired, or not a server certificate */
	ONERMA_E_CERT_REFUSED,  /* the owner refused this client's certificate (foreign CA, expired) */
	ONERMA_E_TLS,           /* another TLS failure (handshake, version, record) */
	ONERMA_E_KX_CLOSED,     /* the owner closed the connection, or an earlier failure left it unusable */
	/* Key exchange: an owner's refusal, one per keyx.Code. */
	ONERMA_E_KX_BAD_REQUEST, /* bad request: the owner found the request malformed */
	ONERMA_E_KX_NO_REGION,   /* unknown region: the owner serves no region of that id */
	ONERMA_E_KX_PERMISSION,  /* permission denied: the region does not allow that op remotely */
	ONERMA_E_KX_REFUSED,     /* refused: the owner's own policy refused */
	ONERMA_E_KX_INTERNAL,    /* internal error: the owner could not answer */
	ONERMA_E_KX_NOT_GRANTED, /* not granted: no permit of this client covers the region and op */
	ONERMA_E_KX_ADDRESS,     /* address not granted: the initiator address is not this client's */
	ONERMA_E_KX_REVOKED,     /* certificate revoked: the CA revoked this client's certificate */
	ONERMA_E_KX_CODE,        /* a refusal code this library does not know */
	ONERMA_E_MAX
};

/* Options of onerma_dial (package portal's Options). Zero values take the
 * defaults; a NULL pointer means all defaults. */
struct onerma_options {
	uint32_t cmd_cap;   /* command ring capacity, a power of two 2..65536 (0: the engine's) */
	uint32_t cpl_cap;   /* completion ring capacity, likewise */
	int service_class;  /* ONERMA_CLASS_LOW or _HIGH (-ONERMA_E_CLASS if not granted) */
	int timeout_ms;     /* bound of each control request (0: 60000) */
	int wait_spins;     /* polls onerma_wait spins before it sleeps (0: 2000; < 0: none) */
	int pin_core;       /* non-zero: ask for engine core `core` to serve the portal */
	int core;           /* 0..63, with pin_core */
};

/* What the engine stamps on this portal's requests (portal.Identity). */
struct onerma_identity {
	uint32_t addr; /* the engine's IPv4 address, host order (10.0.0.1 = 0x0a000001) */
	uint32_t pid;  /* the identity the engine gave this process: K_d is derived for it */
	uint32_t uid;
	uint32_t gid;
	char name[ONERMA_MAX_NAME_BYTES + 1]; /* the portal's name: a label */
	char tenant[256];                     /* the tenant the engine charges */
};

struct onerma_portal; /* an open portal */
struct onerma_region; /* a registered region */

/* One op to post (portal.Op). Zero it, then set what the op needs.
 * READ copies `length` bytes of the remote region at remote_offset into
 * `local` at local_offset (local needs ONERMA_PERM_LOCAL_WRITE). WRITE
 * copies local's range into the remote region (local needs
 * ONERMA_PERM_LOCAL_READ). REKEY installs the 16 bytes of local at
 * local_offset as the remote region's new K_r (remote_offset 0, length 0
 * or 16). LOOKUP (docs/protocol.md, "Lookups") names a bucket at
 * remote_offset (below 2^32) of a region its owner registered with a
 * bucket layout and ONERMA_PERM_REMOTE_LOOKUP, and a tag: the serving
 * engine scans that bucket for the first entry whose tag field equals
 * `tag`, follows its pointer once and answers with the entry at
 * local_offset and, from onerma_lookup_target_offset(entry_bytes) on, the
 * bytes it points to (the bytes between are zero when the entry shares
 * its frame with the target, an entry smaller than a frame's data, else
 * left as they were); `length`
 * is the most the answer may take (local needs ONERMA_PERM_LOCAL_WRITE),
 * the completion's length the answer's. ONERMA_FLAG_LOOKUP_BUCKET in
 * `flags` asks for the bucket when no entry matches. The local range
 * belongs to the op until its completion. */
struct onerma_op {
	uint32_t type;          /* enum onerma_op_type */
	uint32_t slot;          /* a slot of this portal with no op in flight */
	uint64_t cookie;        /* echoed in the completion */
	uint32_t remote_addr;   /* the serving engine's IPv4 address, host order */
	uint32_t remote_region; /* the region id its owner handed out */
	uint64_t remote_offset;
	uint8_t key[ONERMA_KEY_SIZE]; /* K_d for this op type, from the region's owner */
	struct onerma_region *local;  /* READ's sink, WRITE's source, REKEY's key */
	uint64_t local_offset;
	uint32_t length; /* 1..4096; REKEY: 0 or 16 */
	uint32_t flags;  /* LOOKUP: 0 or ONERMA_FLAG_LOOKUP_BUCKET; other ops: 0 */
	uint64_t tag;    /* LOOKUP: the tag to match; other ops: 0 */
};

/* A region's bucket layout, for LOOKUPs (abi.BucketLayout). A bucket is
 * bucket_bytes (1..4096) at the offset a LOOKUP names; its entries start
 * every entry_bytes (1..bucket_bytes) from the bucket's start, as many as
 * fit the bucket whole, and onerma_lookup_target_offset(entry_bytes) must
 * be below 4096. In an entry, the tag, the pointer and the length are
 * little-endian unsigned integers of tag_width, ptr_width and len_width
 * bytes (1, 2, 4 or 8) at tag_off, ptr_off and len_off, each inside the
 * entry. The pointer is an offset in `linked` (a region of the same
 * portal: the slab), or in the bucket's own region when linked is 0, in
 * units of 2^ptr_shift bytes (0..ONERMA_MAX_PTR_SHIFT; 0: bytes; an index
 * of 64-byte aligned records stores offset/64: 6). The fields are in
 * abi.BucketLayout's order. */
struct onerma_bucket_layout {
	uint32_t bucket_bytes;
	uint32_t entry_bytes;
	uint32_t tag_off;
	uint32_t tag_width;
	uint32_t ptr_off;
	uint32_t ptr_width;
	uint32_t ptr_shift; /* 0..ONERMA_MAX_PTR_SHIFT */
	uint32_t len_off;
	uint32_t len_width;
	uint32_t linked; /* a region id of this portal, or 0 */
};

/* The outcome of one op (abi.Completion): exactly one per op posted. */
struct onerma_completion {
	uint64_t cookie;
	uint32_t slot;
	uint8_t status;          /* enum onerma_status */
	uint8_t op;              /* enum onerma_op_type */
	uint16_t reserved;
	uint32_t issue_delay_ns; /* posted (seen by the engine) -> entered service */
	uint32_t total_delay_ns; /* posted -> completed; remote delay = total - issue */
	uint32_t length;         /* bytes transferred (the op's length when OK) */
};

/* ---- Portals (control path) ---- */

/* onerma_dial connects to the engine's control socket (NULL: the default),
 * opens a portal named `name` and stores it in *out. */
ONERMA_API int onerma_dial(const char *socket_path, const char *name, const struct onerma_options *opt,
			   struct onerma_portal **out);

/* onerma_redial opens a new portal on p's socket with p's name and options,
 * retrying every few milliseconds (up to 100 ms apart) while nothing
 * serves the socket, for up to timeout_ms (< 0: without end). The new
 * portal starts empty: allocate slots and register regions again. p stays
 * open (its regions mapped) until onerma_close(p). */
ONERMA_API int onerma_redial(struct onerma_portal *p, int timeout_ms, struct onerma_portal **out);

/* onerma_close closes the control connection (the engine reclaims the
 * portal, its slots and its regions), unmaps the segment and every region
 * and frees p and its regions. NULL is a no-op. */
ONERMA_API int onerma_close(struct onerma_portal *p);

ONERMA_API void onerma_portal_identity(const struct onerma_portal *p, struct onerma_identity *out);
ONERMA_API int onerma_portal_class(const struct onerma_portal *p); /* as granted */
ONERMA_API int onerma_portal_core(const struct onerma_portal *p);  /* the engine core serving it */
ONERMA_API int onerma_portal_max_slots(const struct onerma_portal *p);
ONERMA_API int onerma_portal_hugetlb(const struct onerma_portal *p);
ONERMA_API int onerma_portal_doorbell(const struct onerma_portal *p); /* wait sleeps on the doorbell */
/* onerma_portal_summary returns 1 when flush rings the core's summary
 * doorbell (the engine then reads the command ring only when rung, and in
 * its fallback scans), 0 when the engine gives none (docs/protocol.md). */
ONERMA_API int onerma_portal_summary(const struct onerma_portal *p);
ONERMA_API uint32_t onerma_portal_cmd_cap(const struct onerma_portal *p);
ONERMA_API uint32_t onerma_portal_cpl_cap(const struct onerma_portal *p);

/* onerma_moderate moderates the engine's completion doorbell, as
 * ibv_modify_cq moderates a completion queue's events: a wait asleep on
 * the doorbell is woken once count completions are ready, or period_us
 * after the first of them, whichever comes first. An application that
 * keeps many ops in flight and sleeps between them is woken (and the
 * engine pays for a wake-up) once per count completions instead of once
 * per burst; one with fewer than count in flight waits period_us for its
 * last completions. count 1 with period_us 0 undoes it. count is 1 .. the
 * completion ring's capacity, and period_us 1 .. ONERMA_MAX_MODERATION_US
 * when count > 1 (-ONERMA_E_INVALID, nothing sent; the engine checks the
 * capacity: -ONERMA_E_BAD_REQUEST). -ONERMA_E_STATE without a doorbell;
 * an engine older than moderation refuses it (-ONERMA_E_BAD_REQUEST). */
ONERMA_API int onerma_moderate(struct onerma_portal *p, uint32_t count, uint32_t period_us);

/* onerma_gone returns 1 once the portal knows its engine went away, else 0.
 * Any thread may call it. */
ONERMA_API int onerma_gone(const struct onerma_portal *p);

/* ---- Slots ---- */

/* onerma_alloc_slots asks the engine for n (1..65536) more slots, adds
 * them to the free list and, when slots is not NULL, stores their ids in
 * slots[0..n-1]. */
ONERMA_API int onerma_alloc_slots(struct onerma_portal *p, uint32_t n, uint32_t *slots);
/* onerma_slot_take takes a free slot (-ONERMA_E_SLOT when none is free). */
ONERMA_API int onerma_slot_take(struct onerma_portal *p, uint32_t *slot);
/* onerma_slot_release returns a slot, normally after reading its completion
 * (-ONERMA_E_SLOT: not owned, or already free). */
ONERMA_API int onerma_slot_release(struct onerma_portal *p, uint32_t slot);
ONERMA_API uint32_t onerma_slots(const struct onerma_portal *p);      /* owned */
ONERMA_API uint32_t onerma_free_slots(const struct onerma_portal *p); /* owned and free */

/* ---- Regions ---- */

/* onerma_register_region asks the engine for `size` bytes (1..2^40) of
 * shared memory with permissions `perm` (a non-zero subset of
 * ONERMA_PERM_ALL) under a fresh random region key K_r, maps it and faults
 * it in (this process is charged for it), and registers it. The memory
 * starts zeroed. */
ONERMA_API int onerma_register_region(struct onerma_portal *p, uint64_t size, unsigned perm,
				      struct onerma_region **out);
/* onerma_register_region_key is onerma_register_region with a K_r the
 * application chose (not all zero). */
ONERMA_API int onerma_register_region_key(struct onerma_portal *p, uint64_t size, unsigned perm,
					  const uint8_t kr[ONERMA_KEY_SIZE], struct onerma_region **out);
/* onerma_register_lookup_region is onerma_register_region for a region
 * that remote LOOKUPs may scan: its buckets are laid out as *layout says
 * and perm must hold ONERMA_PERM_REMOTE_LOOKUP (with any of
 * ONERMA_PERM_ALL's bits). The layout must be valid
 * (onerma_bucket_layout_check), a bucket must fit the region, the region
 * may hold at most ONERMA_MAX_LOOKUP_REGION_BYTES, and layout->linked, when
 * not 0, must be a region of this portal (it must stay registered while
 * this one is: a LOOKUP whose entry points into a linked region that is
 * gone ends REMOTE_LOOKUP_BOUNDS). -ONERMA_E_INVALID otherwise, nothing
 * asked of the engine (onerma_errmsg says what). */
ONERMA_API int onerma_register_lookup_region(struct onerma_portal *p, uint64_t size, unsigned perm,
					     const struct onerma_bucket_layout *layout, struct onerma_region **out);
/* onerma_register_lookup_region_key is onerma_register_lookup_region with
 * a K_r the application chose (not all zero). */
ONERMA_API int onerma_register_lookup_region_key(struct onerma_portal *p, uint64_t size, unsigned perm,
						 const struct onerma_bucket_layout *layout,
						 const uint8_t kr[ONERMA_KEY_SIZE], struct onerma_region **out);
/* onerma_bucket_layout_check checks a layout on its own (the engine checks
 * it against the regions when the region is registered): 0, or
 * -ONERMA_E_INVALID with onerma_errmsg saying which rule it breaks. */
ONERMA_API int onerma_bucket_layout_check(const struct onerma_bucket_layout *layout);
/* onerma_lookup_target_offset is where a LOOKUP's answer puts the target:
 * the first multiple of 64 at or after the entry's end. */
ONERMA_API uint32_t onerma_lookup_target_offset(uint32_t entry_bytes);
/* onerma_deregister_region invalidates r in the engine (which never touches
 * its memory again), unmaps it and frees r. Ops in flight naming it
 * complete with an error status. */
ONERMA_API int onerma_deregister_region(struct onerma_portal *p, struct onerma_region *r);
/* onerma_rekey replaces r's K_r (the local rekey): once it returns, the
 * engine authenticates requests for r only with K_d derived from kr. */
ONERMA_API int onerma_rekey(struct onerma_portal *p, struct onerma_region *r, const uint8_t kr[ONERMA_KEY_SIZE]);

ONERMA_API uint32_t onerma_region_id(const struct onerma_region *r);
ONERMA_API void *onerma_region_addr(const struct onerma_region *r); /* the memory, shared with the engine */
ONERMA_API uint64_t onerma_region_size(const struct onerma_region *r);
ONERMA_API unsigned onerma_region_perm(const struct onerma_region *r);
ONERMA_API int onerma_region_hugetlb(const struct onerma_region *r);
/* onerma_region_layout copies r's bucket layout into *out and returns 1,
 * or zeroes *out and returns 0 for a region registered without one. */
ONERMA_API int onerma_region_layout(const struct onerma_region *r, struct onerma_bucket_layout *out);
/* onerma_region_key copies r's current K_r (secret: hand out K_d only). */
ONERMA_API void onerma_region_key(struct onerma_region *r, uint8_t kr[ONERMA_KEY_SIZE]);
/* onerma_region_derive_kd is onerma_derive_kd under r's current K_r. */
ONERMA_API int onerma_region_derive_kd(struct onerma_region *r, uint32_t initiator_addr, uint32_t identity,
				       unsigned op, uint8_t kd[ONERMA_KEY_SIZE]);

/* ---- Ops and completions (data path) ---- */

/* onerma_post checks op against what the portal knows (-ONERMA_E_OP,
 * _LENGTH, _REGION, _BOUNDS), writes its Command into the command ring and
 * stages it without publishing it. -ONERMA_E_RING_FULL: flush, poll and
 * retry; -ONERMA_E_ENGINE_GONE once the engine is known gone. The engine
 * checks the rest and answers with the completion's status. */
ONERMA_API int onerma_post(struct onerma_portal *p, const struct onerma_op *op);
/* onerma_flush publishes every staged op with one store (doorbell batching)
 * and, when it published something and the engine gave the portal a
 * summary doorbell (onerma_portal_summary), rings its bit there: a load,
 * and an atomic OR when the bit is clear. */
ONERMA_API void onerma_flush(struct onerma_portal *p);
/* onerma_submit is onerma_post then onerma_flush. */
ONERMA_API int onerma_submit(struct onerma_portal *p, const struct onerma_op *op);
/* onerma_staged: ops posted and not yet taken by the engine (staged ones included). */
ONERMA_API uint32_t onerma_staged(const struct onerma_portal *p);
/* onerma_posted: ops posted whose completion poll or wait has not yet
 * returned (a scan: for diagnostics, not the data path). */
ONERMA_API uint32_t onerma_posted(const struct onerma_portal *p);

/* onerma_poll copies up to n completions into out and returns how many
 * (0: none yet). It never blocks. It returns a negative code only when it
 * has none to return: -ONERMA_E_RING_CORRUPT, or -ONERMA_E_ENGINE_GONE
 * once the engine is gone and every completion due has been returned. */
ONERMA_API int onerma_poll(struct onerma_portal *p, struct onerma_completion *out, int n);

/* onerma_wait returns at least one completion, like onerma_poll, waiting
 * up to timeout_ms (< 0: without end; -ETIMEDOUT when it ends). It spins
 * first, then arms the doorbell, re-checks the ring and sleeps in poll(2)
 * on the doorbell until the engine rings (or the library does, on noticing
 * the engine is gone); without a doorbell it sleeps with backoff. */
ONERMA_API int onerma_wait(struct onerma_portal *p, struct onerma_completion *out, int n, int timeout_ms);

/* ---- Key exchange (keyx): fetching K_d from a region's owner ---- */

/*
 * A reader gets the K_d of each region it uses from the region's owner over
 * the owner's key exchange, keyx (docs/protocol.md, "Key exchange"): TLS 1.3
 * with mutual authentication under one CA, one 16-byte request and one
 * reply per fetch. The credentials are the directory `rmactl creds DIR`
 * writes: DIR/client.pem (the CA's certificate, the client certificate,
 * its ECDSA P-256 private key in PKCS #8), as Go's keyx.LoadClient reads it.
 *
 *	struct onerma_identity id;
 *	struct onerma_keyx *kx;
 *	struct onerma_grant g;
 *	onerma_portal_identity(p, &id);              // the engine-stamped identity
 *	onerma_keyx_dial("owner.example:7000", "/etc/onerma/creds", 5000, &kx);
 *	onerma_keyx_fetch(kx, region, ONERMA_OP_READ, id.addr, id.pid, 5000, &g);
 *	onerma_keyx_close(kx);
 *	struct onerma_op op = {0};
 *	onerma_op_set_grant(&op, &g);                // remote_addr, remote_region, key
 *	op.type = ONERMA_OP_READ; ...
 *	onerma_grant_zero(&g);                       // once done with the region
 *
 * Errors: -ONERMA_E_CREDS_* for this process's credentials,
 * -ONERMA_E_SERVER_CERT, _CERT_REFUSED and _TLS for the session,
 * -ONERMA_E_KX_* for an owner's refusal (onerma_errmsg() holds the owner's
 * own message), -ONERMA_E_PROTOCOL for a malformed reply, -errno for the
 * system (-ECONNREFUSED, -ETIMEDOUT, -ENOENT: no credentials file, ...).
 *
 * A struct onerma_keyx carries one request at a time: use it from one
 * thread, or dial one per thread. After a malformed exchange, a transport
 * or TLS error, or a bad-request, revoked or internal refusal (the owner
 * hangs up after those), it is unusable (-ONERMA_E_KX_CLOSED): close it
 * and dial again. Other refusals leave it usable.
 */
struct onerma_keyx; /* a connection to one owner's key exchange */

/* An owner's grant (keyx.Grant): the K_d of one request, and where and how
 * large the region is. */
struct onerma_grant {
	uint8_t kd[ONERMA_KEY_SIZE]; /* K_d: put it in each op's key; secret */
	uint32_t region;             /* the region id asked for */
	uint32_t op;                 /* the op type asked for (enum onerma_op_type) */
	uint32_t owner_addr;         /* the owner engine's IPv4 address, host order: send ops there */
	uint64_t size;               /* the region's size in bytes */
};

/* onerma_keyx_check_creds loads the client credentials of creds_dir
 * (creds_dir/client.pem) and checks them as onerma_keyx_dial does, without
 * dialling: 0, or the error dial would return for them. */
ONERMA_API int onerma_keyx_check_creds(const char *creds_dir);

/* onerma_keyx_dial loads the client credentials of creds_dir, connects to
 * the owner's key exchange at addr ("host:port", "[v6]:port") and completes
 * the TLS 1.3 handshake, verifying that the owner's certificate is from the
 * credentials' CA, has the server-auth usage and names host (a DNS name or
 * an IP address). It retries a refused TCP connection (the owner still
 * starting) until timeout_ms ends (0: 30000; < 0: without end). With TLS
 * 1.3 the owner judges this client's certificate after the client's side
 * of the handshake is done: its refusal shows on the first fetch
 * (-ONERMA_E_CERT_REFUSED). */
ONERMA_API int onerma_keyx_dial(const char *addr, const char *creds_dir, int timeout_ms, struct onerma_keyx **out);

/* onerma_keyx_fetch asks the owner for the K_d of the process whose engine
 * stamps it with `identity` (onerma_identity.pid) through the engine at
 * initiator_addr (onerma_identity.addr, host order), for ops of type `op`
 * (ONERMA_OP_READ, _WRITE, _REKEY or _LOOKUP) on `region`, waiting up to
 * timeout_ms (0: 30000; < 0: without end). On success *out holds the
 * grant, checked to answer this region and op; on failure *out is zeroed. */
ONERMA_API int onerma_keyx_fetch(struct onerma_keyx *kx, uint32_t region, int op, uint32_t initiator_addr,
				 uint32_t identity, int timeout_ms, struct onerma_grant *out);

/* onerma_keyx_fetch_for is onerma_keyx_fetch for the process behind id
 * (onerma_portal_identity). */
ONERMA_API int onerma_keyx_fetch_for(struct onerma_keyx *kx, const struct onerma_identity *id, uint32_t region,
				     int op, int timeout_ms, struct onerma_grant *out);

/* onerma_keyx_peer_name copies the common name of the owner's certificate
 * into buf (NUL-terminated, cut to n-1 bytes). */
ONERMA_API void onerma_keyx_peer_name(const struct onerma_keyx *kx, char *buf, size_t n);

/* onerma_keyx_close ends the TLS session, closes the connection and frees
 * kx (its private key zeroed). NULL is a no-op. */
ONERMA_API void onerma_keyx_close(struct onerma_keyx *kx);

/* onerma_op_set_grant sets op's remote_addr, remote_region and key from g. */
ONERMA_API void onerma_op_set_grant(struct onerma_op *op, const struct onerma_grant *g);

/* onerma_grant_zero zeroes g, its K_d with it, in a way the compiler keeps. */
ONERMA_API void onerma_grant_zero(struct onerma_grant *g);

/* ---- Keys, addresses, errors ---- */

/* onerma_derive_kd computes K_d = AES-128_{K_r}(initiator address ||
 * identity || op || 0^56): the key the process with engine-stamped
 * identity `identity`, initiating `op` through the engine at
 * initiator_addr (host order), puts in its ops on the region of K_r `kr`.
 * An owner hands it to that process over its own authenticated channel. */
ONERMA_API int onerma_derive_kd(const uint8_t kr[ONERMA_KEY_SIZE], uint32_t initiator_addr, uint32_t identity,
				unsigned op, uint8_t kd[ONERMA_KEY_SIZE]);

/* onerma_addr_parse parses dotted IPv4 into host order; onerma_addr_format
 * writes it into buf (at least 16 bytes). */
ONERMA_API int onerma_addr_parse(const char *s, uint32_t *addr);
ONERMA_API char *onerma_addr_format(uint32_t addr, char *buf);

/* onerma_strerror names an error code (negative or positive). */
ONERMA_API const char *onerma_strerror(int err);
/* onerma_status_str is a status's name (REMOTE_AUTHENTICATION_FAILURE, ...). */
ONERMA_API const char *onerma_status_str(int status);
/* onerma_errmsg is the detail of the calling thread's last failed control
 * call: the engine's own message for a refusal, or the library's. */
ONERMA_API const char *onerma_errmsg(void);
/* onerma_errquota names the quota of the last -ONERMA_E_QUOTA ("" else). */
ONERMA_API const char *onerma_errquota(void);

#ifdef __cplusplus
}
#endif

#endif /* ONERMA_H */
