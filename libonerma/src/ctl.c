/*
 * ctl.c - the control protocol (Go: package ctlmsg): requests encoded as
 * the canonical datagram, responses decoded with jansson and validated
 * field by field, and the round trip on the SOCK_SEQPACKET connection with
 * its SCM_RIGHTS descriptor.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "internal.h"

static const char *const op_names[ONR_OP_COUNT] = {
	[ONR_OP_OPEN] = "open",
	[ONR_OP_ATTACH] = "attach",
	[ONR_OP_ALLOC_SLOTS] = "alloc_slots",
	[ONR_OP_CREATE_REGION] = "create_region",
	[ONR_OP_REGISTER_REGION] = "register_region",
	[ONR_OP_DEREGISTER_REGION] = "deregister_region",
	[ONR_OP_IDENTITY] = "identity",
	[ONR_OP_STATS] = "stats",
	[ONR_OP_REKEY] = "rekey",
	[ONR_OP_DOORBELL] = "doorbell",
	[ONR_OP_MODERATE] = "moderate",
	[ONR_OP_SUMMARY] = "summary",
};

const char *onr_op_name(enum onr_req_op op) { return (unsigned)op < ONR_OP_COUNT ? op_names[op] : "?"; }

static const struct {
	const char *code;
	int err;
} codes[] = {
	{"bad_request", ONERMA_E_BAD_REQUEST}, {"state", ONERMA_E_STATE},
	{"slot_cap", ONERMA_E_SLOT_CAP},       {"class", ONERMA_E_CLASS},
	{"no_slots", ONERMA_E_NO_SLOTS},       {"limit", ONERMA_E_LIMIT},
	{"quota", ONERMA_E_QUOTA},             {"no_region", ONERMA_E_NO_REGION},
	{"resource", ONERMA_E_RESOURCE},       {"unavailable", ONERMA_E_UNAVAILABLE},
	{"internal", ONERMA_E_INTERNAL},       {"too_large", ONERMA_E_TOO_LARGE},
	{"fds_rejected", ONERMA_E_FDS_REJECTED},
};

int onr_code_error(const char *code)
{
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
		if (strcmp(code, codes[i].code) == 0)
			return -codes[i].err;
	return -ONERMA_E_ENGINE;
}

/* ---- Requests ---- */

static int append(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int n;
	if (*len >= cap)
		return -1;
	va_start(ap, fmt);
	n = vsnprintf(buf + *len, cap - *len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= cap - *len)
		return -1;
	*len += (size_t)n;
	return 0;
}

static int append_key(char *buf, size_t cap, size_t *len, const uint8_t *k)
{
	static const char digits[] = "0123456789abcdef";
	if (append(buf, cap, len, ",\"key\":\"") != 0 || cap - *len < 2 * ONERMA_KEY_SIZE + 1)
		return -1;
	for (int i = 0; i < ONERMA_KEY_SIZE; i++) {
		buf[(*len)++] = digits[k[i] >> 4];
		buf[(*len)++] = digits[k[i] & 15];
	}
	return append(buf, cap, len, "\"");
}

int onr_encode_request(const struct onr_request *r, char *buf, size_t cap)
{
	size_t n = 0;
	int bad = 0;
	if ((unsigned)r->op >= ONR_OP_COUNT)
		return -ONERMA_E_INVALID;
	bad |= append(buf, cap, &n, "{\"v\":%d", ONERMA_PROTOCOL_VERSION);
	if (r->id != 0)
		bad |= append(buf, cap, &n, ",\"id\":%" PRIu64, r->id);
	bad |= append(buf, cap, &n, ",\"op\":\"%s\"", op_names[r->op]);
	switch (r->op) {
	case ONR_OP_OPEN:
		/* The name was checked: [A-Za-z0-9._-] needs no escaping. */
		bad |= append(buf, cap, &n, ",\"name\":\"%s\"", r->name ? r->name : "");
		if (r->cmd_cap)
			bad |= append(buf, cap, &n, ",\"cmd_cap\":%" PRIu32, r->cmd_cap);
		if (r->cpl_cap)
			bad |= append(buf, cap, &n, ",\"cpl_cap\":%" PRIu32, r->cpl_cap);
		if (r->service_class == ONERMA_CLASS_HIGH)
			bad |= append(buf, cap, &n, ",\"class\":\"high\"");
		if (r->pin_core)
			bad |= append(buf, cap, &n, ",\"core\":%" PRIu32, r->core);
		break;
	case ONR_OP_ALLOC_SLOTS:
		bad |= append(buf, cap, &n, ",\"n\":%" PRIu32, r->n);
		break;
	case ONR_OP_CREATE_REGION:
		bad |= append(buf, cap, &n, ",\"size\":%" PRIu64, r->size);
		break;
	case ONR_OP_REGISTER_REGION:
		bad |= append(buf, cap, &n, ",\"memory\":%" PRIu32 ",\"perm\":%" PRIu32, r->memory, r->perm);
		bad |= append_key(buf, cap, &n, r->key);
		if (r->layout.bucket_bytes != 0) {
			const struct onerma_bucket_layout *l = &r->layout;
			bad |= append(buf, cap, &n,
				      ",\"layout\":[%" PRIu32 ",%" PRIu32 ",%" PRIu32 ",%" PRIu32 ",%" PRIu32 ",%" PRIu32
				      ",%" PRIu32 ",%" PRIu32 ",%" PRIu32 ",%" PRIu32 "]",
				      l->bucket_bytes, l->entry_bytes, l->tag_off, l->tag_width, l->ptr_off, l->ptr_width,
				      l->ptr_shift, l->len_off, l->len_width, l->linked);
		}
		break;
	case ONR_OP_DEREGISTER_REGION:
		bad |= append(buf, cap, &n, ",\"region\":%" PRIu32, r->region);
		break;
	case ONR_OP_REKEY:
		bad |= append(buf, cap, &n, ",\"region\":%" PRIu32, r->region);
		bad |= append_key(buf, cap, &n, r->key);
		break;
	case ONR_OP_MODERATE:
		bad |= append(buf, cap, &n, ",\"count\":%" PRIu32 ",\"period_us\":%" PRIu32, r->count, r->period_us);
		break;
	default:
		break;
	}
	bad |= append(buf, cap, &n, "}");
	return bad ? -ONERMA_E_INVALID : (int)n;
}

/* ---- Responses ---- */

/* A decode failure: the detail goes into reply->error; no more than a
 * few bytes of the engine's text are ever quoted. */
static int bad(struct onr_reply *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct onr_reply *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->error, sizeof r->error, fmt, ap);
	va_end(ap);
	return -ONERMA_E_PROTOCOL;
}

/* get_uint reads an unsigned integer in [lo, hi] at key (absent: 0 unless
 * required). */
static int get_uint(struct onr_reply *r, json_t *obj, const char *key, bool required, uint64_t lo, uint64_t hi,
		    uint64_t *out)
{
	json_t *v = json_object_get(obj, key);
	json_int_t x;
	*out = 0;
	if (!v)
		return required ? bad(r, "reply has no \"%s\"", key) : 0;
	if (!json_is_integer(v))
		return bad(r, "reply's \"%s\" is not an integer", key);
	x = json_integer_value(v);
	if (x < 0 || (uint64_t)x < lo || (uint64_t)x > hi)
		return bad(r, "reply's \"%s\" = %lld is out of range [%llu, %llu]", key, (long long)x,
			   (unsigned long long)lo, (unsigned long long)hi);
	*out = (uint64_t)x;
	return 0;
}

static int get_u32(struct onr_reply *r, json_t *obj, const char *key, bool required, uint32_t lo, uint32_t *out)
{
	uint64_t v;
	int err = get_uint(r, obj, key, required, lo, UINT32_MAX, &v);
	*out = (uint32_t)v;
	return err;
}

/* get_str copies the string at key into dst (absent: ""), refusing one
 * that does not fit or holds a NUL. */
static int get_str(struct onr_reply *r, json_t *obj, const char *key, bool required, char *dst, size_t cap)
{
	json_t *v = json_object_get(obj, key);
	size_t n;
	dst[0] = 0;
	if (!v)
		return required ? bad(r, "reply has no \"%s\"", key) : 0;
	if (!json_is_string(v))
		return bad(r, "reply's \"%s\" is not a string", key);
	n = json_string_length(v);
	if (n >= cap || memchr(json_string_value(v), 0, n))
		return bad(r, "reply's \"%s\" is %zu bytes, at most %zu without NUL", key, n, cap - 1);
	memcpy(dst, json_string_value(v), n + 1);
	return 0;
}

static int get_bool(struct onr_reply *r, json_t *obj, const char *key, bool *out)
{
	json_t *v = json_object_get(obj, key);
	*out = false;
	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return bad(r, "reply's \"%s\" is not a boolean", key);
	*out = json_is_true(v);
	return 0;
}

static json_t *get_obj(struct onr_reply *r, json_t *obj, const char *key, int *err)
{
	json_t *v = json_object_get(obj, key);
	if (!v || !json_is_object(v)) {
		*err = bad(r, "reply has no \"%s\" object", key);
		return NULL;
	}
	return v;
}

static int decode_identity(struct onr_reply *r, json_t *o)
{
	struct onerma_identity *id = &r->ident;
	char addr[64];
	int err = get_str(r, o, "addr", true, addr, sizeof addr);
	if (!err && onerma_addr_parse(addr, &id->addr) != 0)
		err = bad(r, "reply's engine address is not IPv4");
	if (!err)
		err = get_u32(r, o, "pid", true, 0, &id->pid);
	if (!err)
		err = get_u32(r, o, "uid", false, 0, &id->uid);
	if (!err)
		err = get_u32(r, o, "gid", false, 0, &id->gid);
	if (!err)
		err = get_str(r, o, "name", false, id->name, sizeof id->name);
	if (!err)
		err = get_str(r, o, "tenant", false, id->tenant, sizeof id->tenant);
	return err;
}

static int decode_open(struct onr_reply *r, json_t *root)
{
	int err = 0;
	char cls[8];
	uint64_t v;
	json_t *o = get_obj(r, root, "open", &err);
	if (!o)
		return err;
	if ((err = get_uint(r, o, "size", true, 1, ONERMA_MAX_REGION_BYTES, &r->seg_size)) ||
	    (err = get_uint(r, o, "map_size", true, r->seg_size, ONERMA_MAX_REGION_BYTES, &r->map_size)) ||
	    (err = get_u32(r, o, "cmd_cap", true, 2, &r->cmd_cap)) ||
	    (err = get_u32(r, o, "cpl_cap", true, 2, &r->cpl_cap)) ||
	    (err = get_uint(r, o, "max_slots", true, 0, INT32_MAX, &v)) ||
	    (err = get_bool(r, o, "hugetlb", &r->hugetlb)) || (err = get_str(r, o, "class", true, cls, sizeof cls)))
		return err;
	r->max_slots = (int)v;
	if (strcmp(cls, "low") == 0)
		r->service_class = ONERMA_CLASS_LOW;
	else if (strcmp(cls, "high") == 0)
		r->service_class = ONERMA_CLASS_HIGH;
	else
		return bad(r, "reply grants class \"%.7s\", want \"low\" or \"high\"", cls);
	return decode_identity(r, o);
}

static int decode_slots(struct onr_reply *r, json_t *root)
{
	json_t *a = json_object_get(root, "slots");
	if (!a || !json_is_array(a))
		return bad(r, "reply has no \"slots\" array");
	if (json_array_size(a) != r->want_slots)
		return bad(r, "the engine gave %zu slots, asked %u", json_array_size(a), r->want_slots);
	for (size_t i = 0; i < r->want_slots; i++) {
		json_t *v = json_array_get(a, i);
		json_int_t x;
		if (!json_is_integer(v) || (x = json_integer_value(v)) < 0 || x > (json_int_t)UINT32_MAX)
			return bad(r, "reply's slot %zu is not a uint32", i);
		r->slots[i] = (uint32_t)x;
	}
	return 0;
}

static int decode_result(struct onr_reply *r, json_t *root, enum onr_req_op op)
{
	int err = 0;
	json_t *o;
	switch (op) {
	case ONR_OP_OPEN:
		return decode_open(r, root);
	case ONR_OP_ATTACH:
		if (!(o = get_obj(r, root, "attach", &err)))
			return err;
		if ((err = get_u32(r, o, "portal", true, 0, &r->portal)) || (err = get_u32(r, o, "core", false, 0, &r->core)))
			return err;
		if (r->core >= ONERMA_MAX_CORES)
			return bad(r, "reply's core %u is not below %d", r->core, ONERMA_MAX_CORES);
		return 0;
	case ONR_OP_ALLOC_SLOTS:
		return decode_slots(r, root);
	case ONR_OP_CREATE_REGION:
		if (!(o = get_obj(r, root, "memory", &err)))
			return err;
		if ((err = get_u32(r, o, "memory", true, 1, &r->memory)) ||
		    (err = get_uint(r, o, "size", true, 1, ONERMA_MAX_REGION_BYTES, &r->size)) ||
		    (err = get_uint(r, o, "map_size", true, r->size, ONERMA_MAX_REGION_BYTES, &r->map_size)))
			return err;
		return get_bool(r, o, "hugetlb", &r->hugetlb);
	case ONR_OP_REGISTER_REGION:
		if (!(o = get_obj(r, root, "region", &err)))
			return err;
		if ((err = get_u32(r, o, "region", true, 1, &r->region)) ||
		    (err = get_uint(r, o, "size", true, 1, ONERMA_MAX_REGION_BYTES, &r->size)) ||
		    (err = get_uint(r, o, "map_size", true, r->size, ONERMA_MAX_REGION_BYTES, &r->map_size)) ||
		    (err = get_u32(r, o, "perm", false, 0, &r->perm)))
			return err;
		return get_bool(r, o, "hugetlb", &r->hugetlb);
	case ONR_OP_IDENTITY:
		if (!(o = get_obj(r, root, "identity", &err)))
			return err;
		return decode_identity(r, o);
	case ONR_OP_STATS:
		return get_obj(r, root, "stats", &err) ? 0 : err;
	case ONR_OP_SUMMARY:
		if (!(o = get_obj(r, root, "summary", &err)))
			return err;
		if ((err = get_uint(r, o, "size", true, 8, ONERMA_MAX_REGION_BYTES, &r->size)) ||
		    (err = get_uint(r, o, "map_size", true, r->size, ONERMA_MAX_REGION_BYTES, &r->map_size)))
			return err;
		if (r->size % 8 != 0)
			return bad(r, "reply's summary of %llu bytes is not whole 8-byte words", (unsigned long long)r->size);
		return 0;
	default: /* deregister_region, rekey, doorbell, moderate: no result */
		return 0;
	}
}

int onr_decode_response(const char *buf, size_t len, enum onr_req_op op, uint64_t want_id, struct onr_reply *r)
{
	json_error_t jerr;
	json_t *root;
	uint64_t v;
	char opname[24];
	int err;

	r->code[0] = r->quota[0] = r->error[0] = 0;
	r->id = 0;
	if ((unsigned)op >= ONR_OP_COUNT)
		return bad(r, "unknown request op");
	if (len > ONR_MAX_RESPONSE_BYTES)
		return bad(r, "reply of %zu bytes, limit %d", len, ONR_MAX_RESPONSE_BYTES);
	/* One JSON object and nothing after it; a key twice is refused. */
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return bad(r, "reply is not JSON: %.80s (at byte %d)", jerr.text, jerr.position);
	if (!json_is_object(root)) {
		err = bad(r, "reply is not a JSON object");
		goto out;
	}
	if ((err = get_uint(r, root, "v", true, 0, UINT32_MAX, &v)))
		goto out;
	if (v != ONERMA_PROTOCOL_VERSION) {
		err = bad(r, "reply of protocol version %llu, this library speaks %d", (unsigned long long)v,
			  ONERMA_PROTOCOL_VERSION);
		goto out;
	}
	if ((err = get_uint(r, root, "id", false, 0, INT64_MAX, &r->id)) ||
	    (err = get_str(r, root, "op", false, opname, sizeof opname)) ||
	    (err = get_str(r, root, "code", false, r->code, sizeof r->code)) ||
	    (err = get_str(r, root, "quota", false, r->quota, sizeof r->quota)))
		goto out;
	if (opname[0] && strcmp(opname, op_names[op]) != 0) {
		err = bad(r, "reply to op \"%.20s\", want \"%s\"", opname, op_names[op]);
		goto out;
	}
	{
		json_t *e = json_object_get(root, "error");
		const char *msg = NULL;
		if (e && !json_is_string(e)) {
			err = bad(r, "reply's \"error\" is not a string");
			goto out;
		}
		if (e)
			msg = json_string_value(e);
		if ((msg && msg[0]) != (r->code[0] != 0)) {
			err = bad(r, "reply has an error without a code, or a code without an error");
			goto out;
		}
		/* id 0 with an error: a refusal before any request was read. */
		if (r->id != want_id && !(r->id == 0 && r->code[0])) {
			err = bad(r, "reply to request %llu, want %llu", (unsigned long long)r->id,
				  (unsigned long long)want_id);
			goto out;
		}
		if (r->code[0]) {
			snprintf(r->error, sizeof r->error, "%s", msg);
			err = onr_code_error(r->code);
			goto out;
		}
	}
	err = decode_result(r, root, op);
out:
	json_decref(root);
	return err;
}

/* ---- The round trip ---- */

static int gone_err(struct onerma_portal *p, const char *what, enum onr_req_op op)
{
	onr_mark_gone(p);
	return onr_fail(-ONERMA_E_ENGINE_GONE, "%s: the engine closed the control connection (%s)", op_names[op], what);
}

int onr_round_trip(struct onerma_portal *p, struct onr_request *req, struct onr_reply *reply, int *fd)
{
	char out[ONR_MAX_REQUEST_BYTES];
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov;
	struct msghdr msg;
	ssize_t n;
	int len, err;
	const char *name = onr_op_name(req->op);

	*fd = -1;
	if (p->fd < 0)
		return onr_fail(-EBADF, "%s: the portal is closed", name);
	if (atomic_load_explicit(&p->gone, memory_order_acquire))
		return onr_fail(-ONERMA_E_ENGINE_GONE, "%s: the engine is gone", name);
	req->id = ++p->next_id;
	len = onr_encode_request(req, out, sizeof out);
	if (len < 0)
		return onr_fail(len, "%s: request does not fit in %d bytes", name, ONR_MAX_REQUEST_BYTES);
	do
		n = send(p->fd, out, (size_t)len, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	err = errno;
	explicit_bzero(out, sizeof out); /* it may hold a region key */
	if (n < 0) {
		if (err == EPIPE || err == ECONNRESET)
			return gone_err(p, strerror(err), req->op);
		if (err == EAGAIN || err == EWOULDBLOCK)
			err = ETIMEDOUT;
		return onr_fail(-err, "%s: sending to the engine: %s", name, strerror(err));
	}

	memset(&msg, 0, sizeof msg);
	iov.iov_base = p->rbuf;
	iov.iov_len = ONR_MAX_RESPONSE_BYTES + 1;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = ctl.buf;
	msg.msg_controllen = sizeof ctl.buf;
	do
		n = recvmsg(p->fd, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		err = errno;
		if (err == ECONNRESET)
			return gone_err(p, strerror(err), req->op);
		if (err == EAGAIN || err == EWOULDBLOCK)
			err = ETIMEDOUT;
		return onr_fail(-err, "%s: reading the engine's reply: %s", name, strerror(err));
	}
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
			if (*fd < 0)
				*fd = f;
			else
				close(f); /* one descriptor per reply at most */
		}
	}
	if (n == 0 && msg.msg_controllen == 0)
		return gone_err(p, "end of file", req->op);
	err = 0;
	if ((msg.msg_flags & MSG_TRUNC) || n > ONR_MAX_RESPONSE_BYTES)
		err = onr_fail(-ONERMA_E_PROTOCOL, "%s: reply longer than %d bytes", name, ONR_MAX_RESPONSE_BYTES);
	else if (msg.msg_flags & MSG_CTRUNC)
		err = onr_fail(-ONERMA_E_PROTOCOL, "%s: reply's file descriptors truncated", name);
	else if ((err = onr_decode_response(p->rbuf, (size_t)n, req->op, req->id, reply)) != 0) {
		onr_fail(err, "%s: %s%s", name, err == -ONERMA_E_PROTOCOL ? "malformed reply: " : "engine: ", reply->error);
		if (err == -ONERMA_E_QUOTA)
			onr_set_quota(reply->quota);
	}
	if (err && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return err;
}
