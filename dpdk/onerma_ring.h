/*
 * onerma_ring.h: rte_rings of mbuf pointers, and the fan-out of one
 * queue's frames to other queues' rings in one call.
 *
 * A ring made here is lock-free on both ends when single-producer and
 * single-consumer (RING_F_SP_ENQ | RING_F_SC_DEQ): the producer alone moves
 * prod.head/prod.tail, the consumer alone cons.head/cons.tail, each with a
 * release store the other side reads with an acquire load. Multi-producer
 * rings serialise their producers on a compare-and-swap of prod.head and
 * then wait for earlier producers to publish prod.tail: a producer
 * preempted between the two holds up the others (DPDK's "non-preemptive
 * constraint"), which threads that share CPUs cannot rule out.
 */
#ifndef ONERMA_RING_H
#define ONERMA_RING_H

#include <stdint.h>

#include <rte_mbuf.h>
#include <rte_ring.h>

#include "onerma_dpdk.h"

enum {
	ONERMA_RING_SP = RING_F_SP_ENQ,
	ONERMA_RING_SC = RING_F_SC_DEQ,
	ONERMA_RING_NAMESIZE = RTE_RING_NAMESIZE,
};

/* A ring of exactly count entries (RING_F_EXACT_SZ) with flags
 * ONERMA_RING_SP / ONERMA_RING_SC. */
struct onerma_ptr_result onerma_ring_create(const char *name, unsigned int count, int socket, unsigned int flags);
void onerma_ring_free(struct rte_ring *r);
unsigned int onerma_ring_enqueue_burst(struct rte_ring *r, struct rte_mbuf **objs, unsigned int n);
unsigned int onerma_ring_dequeue_burst(struct rte_ring *r, struct rte_mbuf **objs, unsigned int n);
unsigned int onerma_ring_count(const struct rte_ring *r);
unsigned int onerma_ring_capacity(const struct rte_ring *r);
/* Dequeues and frees every mbuf left in r; returns how many. */
unsigned int onerma_ring_drain(struct rte_ring *r);

/*
 * onerma_fanout: the mbufs one queue's poller hands to others, gathered per
 * destination ring in C memory by Go (no call per mbuf) and enqueued by
 * onerma_fanout_send, one crossing for every ring.
 *
 * bcast[0..n_bcast) go to every destination that has a ring (borrowed: the
 * sender keeps its reference; free adds none and frees none): send adds one
 * reference per ring to each (rte_mbuf_refcnt_update) before any ring makes
 * it visible, so each receiver frees its own reference and the sender keeps
 * the one it had. The receivers only read such an mbuf.
 */
struct onerma_fanout {
	struct rte_ring **ring;  /* ring[j]: destination j; NULL: none (the sender itself) */
	struct rte_mbuf **buf;   /* buf[j*cap .. j*cap+len[j]): queued for destination j */
	uint16_t *len;           /* [n] */
	struct rte_mbuf **bcast; /* [cap] */
	uint16_t n;              /* destinations */
	uint16_t cap;            /* per destination, and of bcast */
	uint16_t n_bcast;
	uint16_t n_rings;        /* destinations with a ring */
	uint16_t queued;         /* mbufs queued since the last send (Go keeps it; send zeroes it) */
	/* Cumulative counters, written by onerma_fanout_send and _flush only. */
	uint64_t calls;          /* crossings of onerma_fanout_send */
	uint64_t sent;    /* references enqueued (a broadcast mbuf counts once per ring) */
	uint64_t dropped; /* references a full ring refused, freed */
};

struct onerma_fanout *onerma_fanout_new(struct rte_ring **rings, uint16_t n, uint16_t cap);
/* Frees every queued mbuf reference and the fanout itself. */
void onerma_fanout_free(struct onerma_fanout *f);
/* Enqueues everything queued, frees what full rings refused; returns the
 * references enqueued. One crossing (counted in calls). */
unsigned int onerma_fanout_send(struct onerma_fanout *f);
/* The same, from inside another crossing (onerma_port_io with io->out):
 * not counted in calls. */
unsigned int onerma_fanout_flush(struct onerma_fanout *f);

/* The rings a PortIO also receives from (onerma_port_io with ONERMA_IO_RX:
 * after the rx burst, up to in_max mbufs from them, starting at a different
 * ring each time). rings are copied; NULL entries are skipped. */
int onerma_io_set_inbound(struct onerma_io *io, struct rte_ring **rings, uint16_t n, uint16_t in_max);

#endif
