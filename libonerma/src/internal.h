/*
 * internal.h - libonerma's private types: the portal, the rings, the
 * control protocol's decoders (which the unit tests and the fuzzer call
 * directly). Nothing here is part of the ABI of libonerma.so.
 */
#ifndef ONERMA_INTERNAL_H
#define ONERMA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onerma.h"

#define ONR_HIDDEN __attribute__((visibility("hidden")))

/* ---- The shared-memory ABI (package abi) ---- */

#define ONR_SEGMENT_MAGIC 0x414d5231u /* "1RMA" little-endian */
#define ONR_SEGMENT_HEADER_SIZE 128u
#define ONR_SEGMENT_ARM_OFF 64u
#define ONR_SEGMENT_SUMMARY_OFF 68u /* abi.SegmentSummaryOff: the summary flag word */
#define ONR_SUMMARY_ON 1u            /* abi.SummaryOn */
#define ONR_RING_HEADER_SIZE 128u
#define ONR_RING_PROD_OFF 0u
#define ONR_RING_CONS_OFF 64u
#define ONR_COMMAND_SIZE 64u
#define ONR_COMPLETION_SIZE 32u

/* The ring indices live in shared memory and are accessed as C11 atomics
 * through a cast; that is sound only where an atomic uint32_t is a plain
 * naturally aligned uint32_t, which these assertions hold the build to. */
_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic u32 has the size of u32");
_Static_assert(_Alignof(_Atomic uint32_t) == _Alignof(uint32_t), "atomic u32 has the alignment of u32");
_Static_assert(sizeof(_Atomic uint64_t) == sizeof(uint64_t), "atomic u64 has the size of u64");
_Static_assert(_Alignof(_Atomic uint64_t) == _Alignof(uint64_t), "atomic u64 has the alignment of u64");

/* A segment header as abi.DecodeLayout accepts it. */
struct onr_layout {
	uint64_t size;
	uint32_t cmd_off, cmd_cap, cpl_off, cpl_cap, portal;
};

/* onr_new_layout is abi.NewLayout: 0, or -ONERMA_E_PROTOCOL for capacities
 * that are not powers of two in [2, 2^30] or a segment beyond 4 GiB. */
ONR_HIDDEN int onr_new_layout(uint32_t portal, uint32_t cmd_cap, uint32_t cpl_cap, struct onr_layout *out);
/* onr_decode_layout validates the header of a mapped segment of len bytes
 * as abi.DecodeLayout does (magic, version, offsets recomputed from the
 * capacities, size within the mapping). */
ONR_HIDDEN int onr_decode_layout(const uint8_t *seg, size_t len, struct onr_layout *out);
/* onr_encode_layout writes a header (the engine's side; for tests). */
ONR_HIDDEN void onr_encode_layout(const struct onr_layout *l, uint8_t *seg);

/* Little-endian accessors of shared memory and wire bytes. */
static inline void onr_put32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
	b[2] = (uint8_t)(v >> 16);
	b[3] = (uint8_t)(v >> 24);
}
static inline void onr_put64(uint8_t *b, uint64_t v)
{
	onr_put32(b, (uint32_t)v);
	onr_put32(b + 4, (uint32_t)(v >> 32));
}
static inline uint32_t onr_get32(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint64_t onr_get64(const uint8_t *b) { return (uint64_t)onr_get32(b) | (uint64_t)onr_get32(b + 4) << 32; }
static inline uint16_t onr_get16(const uint8_t *b) { return (uint16_t)(b[0] | b[1] << 8); }

/* The command a post writes (abi.Command). */
struct onr_command {
	uint8_t op, flags;
	uint32_t slot;
	uint64_t cookie;
	uint32_t remote_addr, remote_region;
	uint64_t remote_offset;
	uint32_t local_region, length;
	uint64_t local_offset;
	uint8_t key[ONERMA_KEY_SIZE];
	uint64_t tag; /* a LOOKUP's */
};
/* onr_encode_command writes c as abi.Command.Encode does: a LOOKUP in its
 * own layout (tag at 24, length u16 at 2, bucket offset u32 at 36, both
 * saturated). */
ONR_HIDDEN void onr_encode_command(const struct onr_command *c, uint8_t *b);
ONR_HIDDEN void onr_decode_completion(const uint8_t *b, struct onerma_completion *c);

/* One side of a single-producer single-consumer ring (abi.Producer,
 * abi.Consumer): indices are free-running uint32s, an entry lives at
 * index & mask. */
struct onr_ring {
	_Atomic uint32_t *prod; /* written by the producer only */
	_Atomic uint32_t *cons; /* written by the consumer only */
	uint8_t *entries;
	uint32_t mask, cap, esize;
	uint32_t next;  /* producer: next index to fill; consumer: next to read */
	uint32_t cache; /* producer: consumer index last seen; consumer: producer index last seen */
	bool corrupt;
};
/* onr_ring_attach views ring memory at mem (RingBytes long, 64-byte
 * aligned) and starts at the indices currently in shared memory. */
ONR_HIDDEN int onr_ring_attach(struct onr_ring *r, uint8_t *mem, uint32_t cap, uint32_t esize, bool producer);

/* ---- The control protocol (package ctlmsg) ---- */

enum onr_req_op {
	ONR_OP_OPEN,
	ONR_OP_ATTACH,
	ONR_OP_ALLOC_SLOTS,
	ONR_OP_CREATE_REGION,
	ONR_OP_REGISTER_REGION,
	ONR_OP_DEREGISTER_REGION,
	ONR_OP_IDENTITY,
	ONR_OP_STATS,
	ONR_OP_REKEY,
	ONR_OP_DOORBELL,
	ONR_OP_SUMMARY,
	ONR_OP_MODERATE,
	ONR_OP_COUNT
};
ONR_HIDDEN const char *onr_op_name(enum onr_req_op op);

#define ONR_MAX_REQUEST_BYTES 4096
#define ONR_MAX_RESPONSE_BYTES (64 << 10)

struct onr_request {
	enum onr_req_op op;
	uint64_t id;
	const char *name; /* open */
	uint32_t cmd_cap, cpl_cap;
	int service_class;
	bool pin_core;
	uint32_t core;
	uint32_t n;      /* alloc_slots */
	uint64_t size;   /* create_region */
	uint32_t memory; /* register_region */
	uint32_t perm;
	uint32_t region; /* deregister_region, rekey */
	uint8_t key[ONERMA_KEY_SIZE];
	uint32_t count, period_us; /* moderate */
	/* register_region's bucket layout (bucket_bytes 0: none), encoded as
	 * ctlmsg's "layout": its ten integers in field order */
	struct onerma_bucket_layout layout;
};
/* onr_encode_request writes the canonical datagram into buf (it holds a key
 * in clear for register_region and rekey): its length, or -ONERMA_E_INVALID. */
ONR_HIDDEN int onr_encode_request(const struct onr_request *r, char *buf, size_t cap);

/* The results of a reply, per op. Strings are NUL-terminated copies. */
struct onr_reply {
	uint64_t id;
	/* open */
	uint64_t seg_size, map_size;
	uint32_t cmd_cap, cpl_cap;
	int service_class;
	int max_slots;
	bool hugetlb;
	struct onerma_identity ident; /* open, identity */
	/* attach */
	uint32_t portal, core;
	/* alloc_slots: into the caller's array of want_slots entries */
	uint32_t *slots;
	uint32_t want_slots;
	/* create_region (size and map_size: also summary's) */
	uint32_t memory;
	uint64_t size;
	/* register_region */
	uint32_t region, perm;
	/* a refusal */
	char code[32];
	char quota[32];
	char error[512];
};

/* onr_decode_response parses and validates one reply datagram to a request
 * of op `op` and id `want_id`: 0 when it carries the op's result,
 * -ONERMA_E_<code> when it is the engine's refusal (reply->error holds the
 * message), -ONERMA_E_PROTOCOL when it breaks the protocol (detail, which
 * never quotes more than a few bytes of it, in reply->error). */
ONR_HIDDEN int onr_decode_response(const char *buf, size_t len, enum onr_req_op op, uint64_t want_id,
				   struct onr_reply *reply);
/* onr_code_error maps a ctlmsg code to -ONERMA_E_*. */
ONR_HIDDEN int onr_code_error(const char *code);

/* ---- Errors ---- */

/* onr_fail records the detail of a failed control call for onerma_errmsg
 * and returns err. */
ONR_HIDDEN int onr_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ONR_HIDDEN void onr_set_quota(const char *quota);

/* ---- Keys ---- */
ONR_HIDDEN int onr_random_key(uint8_t k[ONERMA_KEY_SIZE]);
ONR_HIDDEN bool onr_key_zero(const uint8_t k[ONERMA_KEY_SIZE]);

/* ---- The key exchange (package keyx) ---- */

#define ONR_KX_VERSION 1          /* keyx.Version */
#define ONR_KX_REQUEST_LEN 16     /* keyx's requestLen */
#define ONR_KX_GRANT_LEN 40       /* keyx's grantLen */
#define ONR_KX_MAX_MSG 256        /* keyx's maxMsgLen: the longest refusal message */
#define ONR_KX_MAX_FRAME (4 + 256) /* keyx's maxFrameLen: the longest reply body */
#define ONR_KX_MAX_BUNDLE 4096    /* keyx's maxBundle: the largest credentials file */
#define ONR_KX_CLIENT_FILE "client.pem" /* keyx.ClientFile */
#define ONR_KX_DEFAULT_TIMEOUT_MS 30000

/* One party's credentials: the CA it trusts, its certificate, its key. */
struct onr_creds {
	struct x509_st *ca, *leaf;
	struct evp_pkey_st *key;
};

/* onr_kx_load_creds reads the bundle at path and checks it as keyx.LoadFile
 * and the role check of keyx.LoadClient (server false) or LoadServer do:
 * 0, or -errno / -ONERMA_E_CREDS_* with the reason in onerma_errmsg. */
ONR_HIDDEN int onr_kx_load_creds(const char *path, bool server, struct onr_creds *out);
/* onr_kx_parse_bundle parses a bundle (keyx's parseCredentials): 0, or
 * -ONERMA_E_CREDS with the reason in why. */
ONR_HIDDEN int onr_kx_parse_bundle(const uint8_t *data, size_t len, struct onr_creds *out, char *why, size_t whyn);
ONR_HIDDEN void onr_kx_creds_free(struct onr_creds *c);
/* onr_kx_encode_request writes a request body, refusing what keyx's
 * Request.check refuses (-ONERMA_E_INVALID). */
ONR_HIDDEN int onr_kx_encode_request(uint8_t b[ONR_KX_REQUEST_LEN], uint32_t region, int op, uint32_t initiator,
				     uint32_t identity);
/* onr_kx_parse_reply decodes a reply body as keyx's parseReply: 0 with the
 * grant in *g; an owner's refusal, -ONERMA_E_KX_* with its message as
 * onerma_errmsg; -ONERMA_E_PROTOCOL for a malformed reply. *g is zeroed on
 * failure. */
ONR_HIDDEN int onr_kx_parse_reply(const uint8_t *b, size_t len, struct onerma_grant *g);
/* onr_kx_code_error maps a keyx.Code to -ONERMA_E_KX_*. */
ONR_HIDDEN int onr_kx_code_error(uint8_t code);

/* ---- The portal ---- */

/* One op posted and not seen completed (portal/track.go's pendingOp). */
struct onr_pending {
	uint64_t cookie;
	uint32_t slot;
	uint8_t op;
	bool live;
};

/* The owned-slot table: slot id -> index into the per-slot arrays, an
 * open-addressed hash table rebuilt (control path) when slots are added,
 * at most half full, so a lookup on the data path allocates nothing. */
struct onr_slot_entry {
	uint32_t slot;
	int32_t idx; /* -1: empty */
};

struct onerma_region {
	struct onerma_portal *p;
	struct onerma_region *next; /* the portal's list */
	uint32_t id;
	uint8_t *mapping; /* map_size bytes */
	uint64_t map_size, size;
	unsigned perm;
	bool hugetlb;
	struct onerma_bucket_layout layout; /* bucket_bytes 0: none */
	pthread_mutex_t kmu; /* guards kr: key and derive_kd run on any thread */
	uint8_t kr[ONERMA_KEY_SIZE];
};

struct onerma_portal {
	/* Data path: only the owning thread touches these. */
	struct onr_ring cmd, cpl;
	bool closed;
	bool dead;    /* poll saw gone */
	bool drained; /* the completion ring has been emptied since */
	uint32_t synth_at;
	uint32_t nslots;       /* owned */
	uint32_t nfree;        /* free stack depth */
	uint32_t *free_stack;  /* nslots entries */
	bool *is_free;         /* by slot index */
	struct onr_pending *pending; /* by slot index */
	struct onr_slot_entry *stab;
	uint32_t stab_mask;
	struct onr_pending *stray; /* capacity stray_cap, allocated at attach */
	uint32_t nstray, stray_cap;

	/* Doorbell. */
	_Atomic uint32_t *arm; /* NULL: no doorbell */
	int bell_fd;
	int spins;

	/* The core's summary doorbell (abi.Summary): flush rings the
	 * portal's bit, sum_mask in the word sum points to. NULL: the engine
	 * gives none and reads the command ring in every poll. */
	_Atomic uint64_t *sum;
	uint64_t sum_mask;
	uint8_t *sum_map;
	uint64_t sum_map_size;

	/* The engine's departure, set by the watcher thread or a control
	 * request; read with acquire by poll. */
	_Atomic int gone;
	int watch_fd; /* the watcher's duplicate of the control connection */
	int stop_fd;  /* an eventfd that stops the watcher */
	pthread_t watcher;
	bool watching;

	/* Control path. */
	int fd;
	char *path;
	char name[ONERMA_MAX_NAME_BYTES + 1];
	struct onerma_options opt; /* as given, for redial */
	int timeout_ms;
	uint64_t next_id;
	struct onerma_identity ident;
	int service_class;
	uint32_t portal_id, core;
	int max_slots;
	bool hugetlb;
	struct onr_layout layout;
	uint8_t *seg;
	uint64_t seg_map;
	struct onerma_region *regions;
	char *rbuf; /* ONR_MAX_RESPONSE_BYTES + 1 */
};

/* onr_round_trip sends req on p's control connection and reads the reply
 * and the descriptor that comes with it (*fd = -1 if none). */
ONR_HIDDEN int onr_round_trip(struct onerma_portal *p, struct onr_request *req, struct onr_reply *reply, int *fd);
ONR_HIDDEN void onr_mark_gone(struct onerma_portal *p);
/* onr_map_fd maps size bytes of an engine memfd, faulting them in, and
 * closes fd. */
ONR_HIDDEN int onr_map_fd(int fd, uint64_t size, uint8_t **out);
/* Tracking of posted ops (track.c). */
ONR_HIDDEN int32_t onr_slot_index(const struct onerma_portal *p, uint32_t slot);
ONR_HIDDEN int onr_slots_add(struct onerma_portal *p, const uint32_t *slots, uint32_t n);
ONR_HIDDEN bool onr_record(struct onerma_portal *p, const struct onr_command *c);
ONR_HIDDEN void onr_settle(struct onerma_portal *p, const struct onerma_completion *c);
ONR_HIDDEN int onr_synthesize(struct onerma_portal *p, struct onerma_completion *out, int n);

#endif
