/*
 * abi.c - the shared-memory ABI: the segment header, commands,
 * completions and the ring views (Go: package abi).
 */
#include <string.h>

#include "internal.h"

/* abi's rings take capacities that are powers of two in [2, 2^30]. */
static bool ring_cap_ok(uint32_t c) { return c >= 2 && c <= (1u << 30) && (c & (c - 1)) == 0; }

int onr_new_layout(uint32_t portal, uint32_t cmd_cap, uint32_t cpl_cap, struct onr_layout *out)
{
	/* abi.NewLayout computes the offsets in uint32: a layout whose
	 * offsets or size would not fit is refused here rather than wrapped. */
	uint64_t cpl_off, size;
	if (!ring_cap_ok(cmd_cap) || !ring_cap_ok(cpl_cap))
		return -ONERMA_E_PROTOCOL;
	cpl_off = ((uint64_t)ONR_SEGMENT_HEADER_SIZE + ONR_RING_HEADER_SIZE + (uint64_t)cmd_cap * ONR_COMMAND_SIZE + 63) & ~(uint64_t)63;
	size = (cpl_off + ONR_RING_HEADER_SIZE + (uint64_t)cpl_cap * ONR_COMPLETION_SIZE + 63) & ~(uint64_t)63;
	if (size > UINT32_MAX)
		return -ONERMA_E_PROTOCOL;
	out->portal = portal;
	out->cmd_cap = cmd_cap;
	out->cpl_cap = cpl_cap;
	out->cmd_off = ONR_SEGMENT_HEADER_SIZE;
	out->cpl_off = (uint32_t)cpl_off;
	out->size = size;
	return 0;
}

void onr_encode_layout(const struct onr_layout *l, uint8_t *seg)
{
	onr_put32(seg + 0, ONR_SEGMENT_MAGIC);
	seg[4] = ONERMA_SEGMENT_VERSION & 0xff;
	seg[5] = ONERMA_SEGMENT_VERSION >> 8;
	onr_put64(seg + 8, l->size);
	onr_put32(seg + 16, l->cmd_off);
	onr_put32(seg + 20, l->cmd_cap);
	onr_put32(seg + 24, l->cpl_off);
	onr_put32(seg + 28, l->cpl_cap);
	onr_put32(seg + 32, l->portal);
}

int onr_decode_layout(const uint8_t *seg, size_t len, struct onr_layout *out)
{
	struct onr_layout l, want;
	if (len < ONR_SEGMENT_HEADER_SIZE)
		return onr_fail(-ONERMA_E_PROTOCOL, "segment of %zu bytes, shorter than its header", len);
	if (onr_get32(seg) != ONR_SEGMENT_MAGIC)
		return onr_fail(-ONERMA_E_PROTOCOL, "segment magic %#x, want %#x", onr_get32(seg), ONR_SEGMENT_MAGIC);
	if (onr_get16(seg + 4) != ONERMA_SEGMENT_VERSION)
		return onr_fail(-ONERMA_E_PROTOCOL, "segment version %u, this library maps %u", onr_get16(seg + 4),
				ONERMA_SEGMENT_VERSION);
	l.size = onr_get64(seg + 8);
	l.cmd_off = onr_get32(seg + 16);
	l.cmd_cap = onr_get32(seg + 20);
	l.cpl_off = onr_get32(seg + 24);
	l.cpl_cap = onr_get32(seg + 28);
	l.portal = onr_get32(seg + 32);
	if (onr_new_layout(l.portal, l.cmd_cap, l.cpl_cap, &want) != 0 || want.cmd_off != l.cmd_off ||
	    want.cpl_off != l.cpl_off || want.size != l.size || l.size > len)
		return onr_fail(-ONERMA_E_PROTOCOL,
				"inconsistent segment layout: size %llu, command ring %u at %u, completion ring %u at %u "
				"(mapped %zu bytes)",
				(unsigned long long)l.size, l.cmd_cap, l.cmd_off, l.cpl_cap, l.cpl_off, len);
	*out = l;
	return 0;
}

void onr_encode_command(const struct onr_command *c, uint8_t *b)
{
	b[0] = c->op;
	b[1] = c->flags;
	onr_put32(b + 4, c->slot);
	onr_put64(b + 8, c->cookie);
	onr_put32(b + 16, c->remote_addr);
	onr_put32(b + 20, c->remote_region);
	onr_put32(b + 32, c->local_region);
	onr_put64(b + 40, c->local_offset);
	memcpy(b + 48, c->key, ONERMA_KEY_SIZE);
	if (c->op == ONERMA_OP_LOOKUP) { /* its layout: length, tag, bucket offset */
		uint32_t length = c->length > 0xffff ? 0xffff : c->length;
		b[2] = (uint8_t)length;
		b[3] = (uint8_t)(length >> 8);
		onr_put64(b + 24, c->tag);
		onr_put32(b + 36, c->remote_offset > UINT32_MAX ? UINT32_MAX : (uint32_t)c->remote_offset);
		return;
	}
	b[2] = 0;
	b[3] = 0;
	onr_put64(b + 24, c->remote_offset);
	onr_put32(b + 36, c->length);
}

void onr_decode_completion(const uint8_t *b, struct onerma_completion *c)
{
	c->cookie = onr_get64(b);
	c->slot = onr_get32(b + 8);
	c->status = b[12];
	c->op = b[13];
	c->reserved = 0;
	c->issue_delay_ns = onr_get32(b + 16);
	c->total_delay_ns = onr_get32(b + 20);
	c->length = onr_get32(b + 24);
}

int onr_ring_attach(struct onr_ring *r, uint8_t *mem, uint32_t cap, uint32_t esize, bool producer)
{
	if (cap < 2 || (cap & (cap - 1)) != 0 || cap > (1u << 30) || ((uintptr_t)mem & 63) != 0)
		return -ONERMA_E_PROTOCOL;
	memset(r, 0, sizeof *r);
	r->prod = (_Atomic uint32_t *)(void *)(mem + ONR_RING_PROD_OFF);
	r->cons = (_Atomic uint32_t *)(void *)(mem + ONR_RING_CONS_OFF);
	r->entries = mem + ONR_RING_HEADER_SIZE;
	r->mask = cap - 1;
	r->cap = cap;
	r->esize = esize;
	if (producer) {
		r->next = atomic_load_explicit(r->prod, memory_order_relaxed);
		r->cache = atomic_load_explicit(r->cons, memory_order_acquire);
		if (r->next - r->cache > cap)
			r->corrupt = true;
	} else {
		r->next = atomic_load_explicit(r->cons, memory_order_relaxed);
		r->cache = r->next;
	}
	return 0;
}
