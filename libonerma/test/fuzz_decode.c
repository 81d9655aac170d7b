/*
 * fuzz_decode.c - libFuzzer target for everything libonerma reads from the
 * engine: reply datagrams to each request (onr_decode_response), the
 * portal segment header (onr_decode_layout) and the ring indices the
 * engine writes (ring_peek's and ring_free's bounds, through onerma_poll
 * and onerma_post on a portal assembled around the input).
 *
 * The first byte picks the decoder: below ONR_OP_COUNT, a reply to that
 * op; then the segment header; then the rings. Invariants: nothing
 * crashes or leaks (ASan, UBSan); a reply is either accepted with every
 * field in its documented range or refused with a detail; an accepted
 * layout is one abi.NewLayout would produce and fits the mapping.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_reply(enum onr_req_op op, const uint8_t *data, size_t size)
{
	struct onr_reply r;
	uint32_t slots[4];
	memset(&r, 0, sizeof r);
	r.slots = slots;
	r.want_slots = 4;
	int err = onr_decode_response((const char *)data, size, op, 7, &r);
	if (err == 0) {
		switch (op) {
		case ONR_OP_OPEN:
			if (r.map_size < r.seg_size || r.map_size > ONERMA_MAX_REGION_BYTES || r.max_slots < 0 ||
			    (r.service_class != ONERMA_CLASS_LOW && r.service_class != ONERMA_CLASS_HIGH))
				abort();
			break;
		case ONR_OP_ATTACH:
			if (r.core >= ONERMA_MAX_CORES)
				abort();
			break;
		case ONR_OP_CREATE_REGION:
		case ONR_OP_REGISTER_REGION:
			if (r.size < 1 || r.map_size < r.size || r.map_size > ONERMA_MAX_REGION_BYTES)
				abort();
			break;
		default:
			break;
		}
		if (strlen(r.ident.name) > ONERMA_MAX_NAME_BYTES || strlen(r.ident.tenant) >= sizeof r.ident.tenant)
			abort();
	} else if (err > -ONERMA_E_BASE || err <= -ONERMA_E_MAX || r.error[sizeof r.error - 1] != 0) {
		abort();
	}
}

static void fuzz_layout(const uint8_t *data, size_t size)
{
	struct onr_layout l, want;
	uint8_t seg[ONR_SEGMENT_HEADER_SIZE] = {0};
	size_t mapped;
	if (size < 8)
		return;
	mapped = onr_get64(data) & ((1ull << 33) - 1);
	memcpy(seg, data + 8, size - 8 < sizeof seg ? size - 8 : sizeof seg);
	if (onr_decode_layout(seg, mapped, &l) == 0) {
		if (onr_new_layout(l.portal, l.cmd_cap, l.cpl_cap, &want) != 0 || want.size != l.size ||
		    want.cmd_off != l.cmd_off || want.cpl_off != l.cpl_off ||
		    l.size > mapped || mapped < ONR_SEGMENT_HEADER_SIZE)
			abort();
	}
}

/* fuzz_rings puts the input's indices into a segment of small rings and
 * drives the application's side over them. */
static void fuzz_rings(const uint8_t *data, size_t size)
{
	static _Alignas(64) uint8_t seg[4096];
	struct onr_layout l;
	struct onerma_portal p;
	struct onerma_region r;
	struct onerma_completion out[8];
	struct onr_pending stray[16];
	if (size < 16)
		return;
	memset(seg, 0, sizeof seg);
	memset(&p, 0, sizeof p);
	memset(&r, 0, sizeof r);
	onr_new_layout(1, 8, 8, &l);
	/* The engine's indices and completions come from the input. */
	onr_put32(seg + l.cmd_off + ONR_RING_PROD_OFF, onr_get32(data));
	onr_put32(seg + l.cmd_off + ONR_RING_CONS_OFF, onr_get32(data + 4));
	onr_put32(seg + l.cpl_off + ONR_RING_PROD_OFF, onr_get32(data + 8));
	onr_put32(seg + l.cpl_off + ONR_RING_CONS_OFF, onr_get32(data + 12));
	memcpy(seg + l.cpl_off + ONR_RING_HEADER_SIZE, data + 16,
	       size - 16 < 8 * ONR_COMPLETION_SIZE ? size - 16 : 8 * ONR_COMPLETION_SIZE);
	onr_ring_attach(&p.cmd, seg + l.cmd_off, l.cmd_cap, ONR_COMMAND_SIZE, true);
	onr_ring_attach(&p.cpl, seg + l.cpl_off, l.cpl_cap, ONR_COMPLETION_SIZE, false);
	p.stray = stray;
	p.stray_cap = 16;
	p.bell_fd = -1;
	r.p = &p;
	r.mapping = seg;
	r.size = 64;
	struct onerma_op op = {.type = ONERMA_OP_READ, .slot = 1, .local = &r, .length = 64};
	for (int i = 0; i < 12; i++) {
		int err = onerma_post(&p, &op);
		if (err != 0 && err != -ONERMA_E_RING_FULL && err != -ONERMA_E_RING_CORRUPT)
			abort();
	}
	onerma_flush(&p);
	for (int i = 0; i < 4; i++) {
		int n = onerma_poll(&p, out, 8);
		if (n > 8 || (n < 0 && n != -ONERMA_E_RING_CORRUPT))
			abort();
	}
	if (onerma_staged(&p) > 8)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] < ONR_OP_COUNT)
		fuzz_reply((enum onr_req_op)data[0], data + 1, size - 1);
	else if (data[0] == ONR_OP_COUNT)
		fuzz_layout(data + 1, size - 1);
	else if (data[0] == ONR_OP_COUNT + 1)
		fuzz_rings(data + 1, size - 1);
	return 0;
}
