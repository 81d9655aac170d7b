/*
 * track.c - the record of every op posted and not yet seen completed
 * (Go: portal/track.go), so that when the engine goes away each of them is
 * reported once with ONERMA_STATUS_ENGINE_GONE: the engine will never
 * write their completions.
 *
 * A slot the portal owns has one record, found through the slot table. A
 * post naming a slot the portal does not own, or one that already has an
 * op posted (the engine answers both with BAD_SLOT at once, unless the
 * earlier op's completion is merely unread), is recorded in stray
 * instead. The engine completes such a post as soon as it takes it from
 * the command ring, having reserved room in the completion ring first, so
 * stray never holds more than cmd_cap + cpl_cap records; its capacity is
 * that, allocated at attach. A completion removes the record of its slot
 * and cookie (the owned slot's first, then a stray one): two posts with
 * the same slot and cookie are interchangeable.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint32_t slot_hash(uint32_t slot, uint32_t mask) { return (slot * 0x9e3779b1u) & mask; }

int32_t onr_slot_index(const struct onerma_portal *p, uint32_t slot)
{
	if (!p->stab)
		return -1;
	for (uint32_t h = slot_hash(slot, p->stab_mask);; h = (h + 1) & p->stab_mask) {
		const struct onr_slot_entry *e = &p->stab[h];
		if (e->idx < 0)
			return -1;
		if (e->slot == slot)
			return e->idx;
	}
}

static void stab_put(struct onr_slot_entry *t, uint32_t mask, uint32_t slot, int32_t idx)
{
	uint32_t h = slot_hash(slot, mask);
	while (t[h].idx >= 0)
		h = (h + 1) & mask;
	t[h].slot = slot;
	t[h].idx = idx;
}

/* onr_slots_add makes n slots the engine gave owned and free (control
 * path: it reallocates the per-slot arrays and rebuilds the table at most
 * half full). */
int onr_slots_add(struct onerma_portal *p, const uint32_t *slots, uint32_t n)
{
	uint32_t total = p->nslots + n, cap = 16;
	struct onr_slot_entry *t;
	for (uint32_t i = 0; i < n; i++) {
		if (onr_slot_index(p, slots[i]) >= 0)
			return onr_fail(-ONERMA_E_PROTOCOL, "alloc_slots: the engine gave slot %u twice", slots[i]);
		for (uint32_t j = 0; j < i; j++)
			if (slots[j] == slots[i])
				return onr_fail(-ONERMA_E_PROTOCOL, "alloc_slots: the engine gave slot %u twice", slots[i]);
	}
	while (cap < 2 * total)
		cap *= 2;
	t = malloc(cap * sizeof *t);
	uint32_t *fs = realloc(p->free_stack, total * sizeof *fs);
	if (fs)
		p->free_stack = fs;
	bool *isf = realloc(p->is_free, total * sizeof *isf);
	if (isf)
		p->is_free = isf;
	struct onr_pending *pend = realloc(p->pending, total * sizeof *pend);
	if (pend)
		p->pending = pend;
	if (!t || !fs || !isf || !pend) { /* what did grow stays grown: harmless */
		free(t);
		return onr_fail(-ENOMEM, "alloc_slots: out of memory");
	}
	for (uint32_t i = 0; i < cap; i++)
		t[i].idx = -1;
	/* The slots owned so far keep their indices. */
	if (p->stab)
		for (uint32_t h = 0; h <= p->stab_mask; h++)
			if (p->stab[h].idx >= 0)
				stab_put(t, cap - 1, p->stab[h].slot, p->stab[h].idx);
	for (uint32_t i = 0; i < n; i++) {
		int32_t idx = (int32_t)(p->nslots + i);
		stab_put(t, cap - 1, slots[i], idx);
		p->is_free[idx] = true;
		memset(&p->pending[idx], 0, sizeof p->pending[idx]);
		p->free_stack[p->nfree++] = slots[i];
	}
	free(p->stab);
	p->stab = t;
	p->stab_mask = cap - 1;
	p->nslots = total;
	return 0;
}

bool onr_record(struct onerma_portal *p, const struct onr_command *c)
{
	struct onr_pending op = {.cookie = c->cookie, .slot = c->slot, .op = c->op, .live = true};
	int32_t i = onr_slot_index(p, c->slot);
	if (i >= 0 && !p->pending[i].live) {
		p->pending[i] = op;
		return true;
	}
	if (p->nstray == p->stray_cap)
		return false;
	p->stray[p->nstray++] = op;
	return true;
}

void onr_settle(struct onerma_portal *p, const struct onerma_completion *c)
{
	int32_t i = onr_slot_index(p, c->slot);
	if (i >= 0 && p->pending[i].live && p->pending[i].cookie == c->cookie) {
		p->pending[i].live = false;
		return;
	}
	for (uint32_t k = 0; k < p->nstray; k++) {
		if (p->stray[k].slot == c->slot && p->stray[k].cookie == c->cookie) {
			p->stray[k] = p->stray[--p->nstray];
			return;
		}
	}
}

static void gone_completion(const struct onr_pending *r, struct onerma_completion *out)
{
	memset(out, 0, sizeof *out);
	out->cookie = r->cookie;
	out->slot = r->slot;
	out->status = ONERMA_STATUS_ENGINE_GONE;
	out->op = r->op;
}

int onr_synthesize(struct onerma_portal *p, struct onerma_completion *out, int n)
{
	int k = 0;
	for (; k < n && p->synth_at < p->nslots; p->synth_at++) {
		struct onr_pending *r = &p->pending[p->synth_at];
		if (r->live) {
			r->live = false;
			gone_completion(r, &out[k++]);
		}
	}
	for (; k < n && p->nstray > 0; k++)
		gone_completion(&p->stray[--p->nstray], &out[k]);
	return k;
}

uint32_t onerma_posted(const struct onerma_portal *p)
{
	uint32_t n = p->nstray;
	for (uint32_t i = 0; i < p->nslots; i++)
		n += p->pending[i].live;
	return n;
}
