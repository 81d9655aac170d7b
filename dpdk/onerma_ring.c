/* onerma_ring.c: see onerma_ring.h. */
#include "onerma_ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <rte_errno.h>

struct onerma_ptr_result onerma_ring_create(const char *name, unsigned int count, int socket, unsigned int flags)
{
	struct onerma_ptr_result r;
	flags &= RING_F_SP_ENQ | RING_F_SC_DEQ;
	r.p = rte_ring_create(name, count, socket, flags | RING_F_EXACT_SZ);
	r.err = r.p == NULL ? (rte_errno > 0 ? rte_errno : ENOMEM) : 0;
	return r;
}

void onerma_ring_free(struct rte_ring *r) { rte_ring_free(r); }

unsigned int onerma_ring_enqueue_burst(struct rte_ring *r, struct rte_mbuf **objs, unsigned int n)
{
	return rte_ring_enqueue_burst(r, (void *const *)objs, n, NULL);
}

unsigned int onerma_ring_dequeue_burst(struct rte_ring *r, struct rte_mbuf **objs, unsigned int n)
{
	return rte_ring_dequeue_burst(r, (void **)objs, n, NULL);
}

unsigned int onerma_ring_count(const struct rte_ring *r) { return rte_ring_count(r); }
unsigned int onerma_ring_capacity(const struct rte_ring *r) { return rte_ring_get_capacity(r); }

unsigned int onerma_ring_drain(struct rte_ring *r)
{
	struct rte_mbuf *m[64];
	unsigned int n, total = 0;
	while ((n = rte_ring_dequeue_burst(r, (void **)m, 64, NULL)) > 0) {
		rte_pktmbuf_free_bulk(m, n);
		total += n;
	}
	return total;
}

struct onerma_fanout *onerma_fanout_new(struct rte_ring **rings, uint16_t n, uint16_t cap)
{
	struct onerma_fanout *f;
	uint16_t j;

	if (n == 0 || cap == 0)
		return NULL;
	/* Plain malloc: the arrays hold pointers only (as onerma_io's). */
	f = calloc(1, sizeof(*f));
	if (f == NULL)
		return NULL;
	f->ring = calloc(n, sizeof(*f->ring));
	f->buf = calloc((size_t)n * cap, sizeof(*f->buf));
	f->len = calloc(n, sizeof(*f->len));
	f->bcast = calloc(cap, sizeof(*f->bcast));
	if (f->ring == NULL || f->buf == NULL || f->len == NULL || f->bcast == NULL) {
		onerma_fanout_free(f);
		return NULL;
	}
	f->n = n;
	f->cap = cap;
	for (j = 0; j < n; j++) {
		f->ring[j] = rings[j];
		if (rings[j] != NULL)
			f->n_rings++;
	}
	return f;
}

void onerma_fanout_free(struct onerma_fanout *f)
{
	uint16_t j;

	if (f == NULL)
		return;
	if (f->len != NULL && f->buf != NULL)
		for (j = 0; j < f->n; j++)
			rte_pktmbuf_free_bulk(f->buf + (size_t)j * f->cap, f->len[j]);
	/* bcast holds no reference of its own until send adds them: the
	 * sender still has its one. */
	free(f->ring);
	free(f->buf);
	free(f->len);
	free(f->bcast);
	free(f);
}

unsigned int onerma_fanout_send(struct onerma_fanout *f)
{
	f->calls++;
	return onerma_fanout_flush(f);
}

unsigned int onerma_fanout_flush(struct onerma_fanout *f)
{
	unsigned int sent = 0;
	uint16_t j, k;

	/* A reference per ring first: once one ring holds the mbuf, its
	 * consumer may free its reference at any time. The sender's own
	 * reference stays with the sender. */
	for (k = 0; k < f->n_bcast; k++)
		rte_mbuf_refcnt_update(f->bcast[k], (int16_t)f->n_rings);
	for (j = 0; j < f->n; j++) {
		struct rte_mbuf **b = f->buf + (size_t)j * f->cap;
		unsigned int n = f->len[j], ok;
		if (f->ring[j] == NULL)
			continue;
		/* Go keeps len[j] + n_bcast <= cap. */
		memcpy(b + n, f->bcast, (size_t)f->n_bcast * sizeof(*b));
		n += f->n_bcast;
		if (n == 0)
			continue;
		ok = rte_ring_enqueue_burst(f->ring[j], (void *const *)b, n, NULL);
		if (ok < n) {
			rte_pktmbuf_free_bulk(b + ok, n - ok);
			f->dropped += n - ok;
		}
		sent += ok;
		f->len[j] = 0;
	}
	f->n_bcast = 0;
	f->queued = 0;
	f->sent += sent;
	return sent;
}

int onerma_io_set_inbound(struct onerma_io *io, struct rte_ring **rings, uint16_t n, uint16_t in_max)
{
	struct rte_ring **in = NULL;
	uint16_t j, k = 0;

	if (in_max > io->burst)
		return -EINVAL;
	if (n > 0) {
		in = calloc(n, sizeof(*in));
		if (in == NULL)
			return -ENOMEM;
		for (j = 0; j < n; j++)
			if (rings[j] != NULL)
				in[k++] = rings[j];
	}
	free(io->in);
	io->in = in;
	io->n_in = k;
	io->in_max = in_max;
	io->in_next = 0;
	return 0;
}
