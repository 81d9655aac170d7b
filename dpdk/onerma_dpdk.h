/*
 * onerma_dpdk.h: C side of package dpdk.
 *
 * Two kinds of functions live here:
 *  - wrappers for DPDK functions that are static inline (rx/tx bursts, mbuf
 *    bulk alloc) or that report errors through the per-thread rte_errno,
 *    which must be read in the same C call as the failing function (a
 *    goroutine may change OS thread between two cgo calls);
 *  - onerma_port_io, the fused per-burst function: one cgo crossing sends a
 *    tx burst, frees the previous rx burst, receives a new one and refills a
 *    stash of free tx mbufs.
 *
 * Errors are returned as negative errno values (DPDK's own convention for
 * ethdev); pointer results come with an errno in a small struct.
 */
#ifndef ONERMA_DPDK_H
#define ONERMA_DPDK_H

#include <stddef.h>
#include <stdint.h>

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

/* mbuf field offsets, read by Go without a cgo call per packet. */
enum {
	ONERMA_MBUF_OFF_BUF_ADDR = offsetof(struct rte_mbuf, buf_addr),
	ONERMA_MBUF_OFF_DATA_OFF = offsetof(struct rte_mbuf, data_off),
	ONERMA_MBUF_OFF_NB_SEGS = offsetof(struct rte_mbuf, nb_segs),
	ONERMA_MBUF_OFF_REFCNT = offsetof(struct rte_mbuf, refcnt),
	ONERMA_MBUF_OFF_PORT = offsetof(struct rte_mbuf, port),
	ONERMA_MBUF_OFF_PKT_LEN = offsetof(struct rte_mbuf, pkt_len),
	ONERMA_MBUF_OFF_DATA_LEN = offsetof(struct rte_mbuf, data_len),
	ONERMA_MBUF_OFF_BUF_LEN = offsetof(struct rte_mbuf, buf_len),
	ONERMA_MBUF_SIZE = sizeof(struct rte_mbuf),
	ONERMA_PKTMBUF_HEADROOM = RTE_PKTMBUF_HEADROOM,
	ONERMA_MBUF_DEFAULT_BUF_SIZE = RTE_MBUF_DEFAULT_BUF_SIZE,
	ONERMA_MEMPOOL_CACHE_MAX = RTE_MEMPOOL_CACHE_MAX_SIZE,
	ONERMA_MAX_LCORE = RTE_MAX_LCORE,
	ONERMA_MAX_ETHPORTS = RTE_MAX_ETHPORTS,
	ONERMA_ETH_NAME_MAX_LEN = RTE_ETH_NAME_MAX_LEN,
};

/* A pointer result with the rte_errno of its failure (err > 0 when p is NULL). */
struct onerma_ptr_result {
	void *p;
	int err;
};

/* EAL */
int onerma_eal_init(int argc, char **argv);
int onerma_eal_cleanup(void);
const char *onerma_strerror(int err);
int onerma_thread_register(void); /* lcore id >= 0 or -errno */
void onerma_thread_unregister(void);
unsigned int onerma_lcore_id(void);
unsigned int onerma_main_lcore(void);
unsigned int onerma_lcore_count(void);
unsigned int onerma_socket_id(void);
unsigned int onerma_socket_count(void);
int onerma_lcore_socket(unsigned int lcore);

/* Mempools */
struct onerma_ptr_result onerma_pktmbuf_pool_create(const char *name, unsigned int n,
						    unsigned int cache_size, uint16_t priv_size,
						    uint16_t data_room_size, int socket_id);
/* A pool of mbufs of one page each (object header, mbuf, data room), page-aligned
 * and back to back. */
struct onerma_ptr_result onerma_pktmbuf_pool_create_paged(const char *name, unsigned int n,
							  unsigned int cache_size, int socket_id);
/* Objects outside [page floor of the first chunk, first chunk + populated x
 * object size): what DPDK 22.11's net_af_xdp registers as the pool's umem. */
unsigned int onerma_mempool_outside_array(struct rte_mempool *mp);
unsigned int onerma_mempool_obj_size(const struct rte_mempool *mp);
unsigned int onerma_mempool_header_size(const struct rte_mempool *mp);
void onerma_mempool_free(struct rte_mempool *mp);
unsigned int onerma_mempool_avail(const struct rte_mempool *mp);
unsigned int onerma_mempool_in_use(const struct rte_mempool *mp);
uint16_t onerma_pktmbuf_data_room_size(struct rte_mempool *mp);
/* The virtual memory chunks a mempool's objects lie in (rte_mempool_mem_iter):
 * fills up to max of out and returns how many chunks there are. */
struct onerma_mem_chunk {
	void *addr;
	size_t len;
};
unsigned int onerma_mempool_mem_chunks(struct rte_mempool *mp, struct onerma_mem_chunk *out, unsigned int max);

/* Ethdev */
int onerma_eth_port_by_name(const char *name); /* port id >= 0 or -errno */
int onerma_eth_port_name(uint16_t port, char *name); /* name: RTE_ETH_NAME_MAX_LEN bytes */
unsigned int onerma_eth_count_avail(void);
int onerma_eth_valid(uint16_t port);
int onerma_eth_socket(uint16_t port);
/* rss: spread flows over the rx queues by the hash functions of IPv4/IPv6
 * and UDP the driver offers (none: no RSS); *rss_hf gets those in force. */
int onerma_eth_configure(uint16_t port, uint16_t nb_rx, uint16_t nb_tx, uint32_t mtu, int rss, uint64_t *rss_hf);
int onerma_eth_rss_hashes(uint16_t port, uint64_t *rss_hf);
int onerma_eth_rxq_setup(uint16_t port, uint16_t q, uint16_t nb_desc, int socket,
			 struct rte_mempool *mp);
int onerma_eth_txq_setup(uint16_t port, uint16_t q, uint16_t nb_desc, int socket);
int onerma_eth_start(uint16_t port);
int onerma_eth_stop(uint16_t port);
int onerma_eth_close(uint16_t port);
int onerma_eth_macaddr(uint16_t port, uint8_t mac[6]);

struct onerma_link {
	uint32_t speed_mbps;
	uint8_t up, full_duplex, autoneg;
};
int onerma_eth_link(uint16_t port, struct onerma_link *l);
int onerma_eth_set_mtu(uint16_t port, uint16_t mtu);
int onerma_eth_get_mtu(uint16_t port, uint16_t *mtu);
int onerma_eth_promiscuous(uint16_t port, int enable);

struct onerma_eth_stats {
	uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf;
};
int onerma_eth_stats(uint16_t port, struct onerma_eth_stats *s);
/* Queue q's counters (the q_* arrays of struct rte_eth_stats; -EINVAL past
 * RTE_ETHDEV_QUEUE_STAT_CNTRS): ipackets, opackets, ibytes, obytes and
 * ierrors (q_errors) are filled. */
int onerma_eth_queue_stats(uint16_t port, uint16_t q, struct onerma_eth_stats *s);

struct onerma_dev_info {
	char driver[64];
	uint32_t min_mtu, max_mtu, max_rx_pktlen;
	uint16_t max_rx_queues, max_tx_queues;
	uint64_t rss_offloads; /* flow_type_rss_offloads */
};
int onerma_eth_info(uint16_t port, struct onerma_dev_info *info);

/*
 * Two ethdevs joined back to back by rte_rings (rte_eth_from_rings): what
 * one sends on its queue q the other receives on its queue q. queues queue
 * pairs each (at most RTE_PMD_RING_MAX_RX_RINGS). Ports in *a, *b.
 */
int onerma_ring_pair(const char *name_a, const char *name_b, unsigned int size, uint16_t queues, int socket,
		     uint16_t *a, uint16_t *b);

/* Burst primitives: one call per burst. */
uint16_t onerma_rx_burst(uint16_t port, uint16_t q, struct rte_mbuf **pkts, uint16_t n);
uint16_t onerma_tx_burst(uint16_t port, uint16_t q, struct rte_mbuf **pkts, uint16_t n);
int onerma_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **pkts, unsigned int n);
void onerma_free_bulk(struct rte_mbuf **pkts, unsigned int n);
void onerma_pktmbuf_free(struct rte_mbuf *m);

/*
 * A pre-transmit hook: a C function another library supplies, run by
 * onerma_port_io right before it transmits, on the polling thread, with
 * the argument given with it (C memory). It knows nothing of what the
 * hook does: it lets the caller finish the frames queued for transmission
 * (seal them, say) inside the same crossing.
 */
typedef void (*onerma_io_hook)(void *arg);

/*
 * The phase boundaries of a crossing of onerma_port_io, where it reads the
 * CPU's time-stamp counter when asked to (onerma_io.stamp): for a caller
 * that charges the crossing's parts to what it spends them on. The phases,
 * in order: the outbound fanout, the pre-transmit hook, the tx burst,
 * freeing the previous rx burst, refilling the stash, the rx burst and the
 * inbound rings.
 */
enum {
	ONERMA_IO_T_START,    /* the crossing begins */
	ONERMA_IO_T_PRE_TX,   /* the outbound fanout sent: the pre-transmit hook begins */
	ONERMA_IO_T_TX,       /* the hook returned: the tx burst begins */
	ONERMA_IO_T_SENT,     /* the tx burst sent (retries, drops): freeing the rx burst begins */
	ONERMA_IO_T_FREED,    /* the previous rx burst freed: the refill begins */
	ONERMA_IO_T_REFILLED, /* the stash refilled: the rx burst begins */
	ONERMA_IO_T_END,      /* the rx burst and the inbound rings received: the crossing ends */
	ONERMA_IO_NTSC
};

struct onerma_fanout;

/*
 * onerma_io: the state of one fused rx/tx queue pair, in C memory. Go writes
 * the "in" fields and reads everything else directly (no cgo call); only
 * onerma_port_io crosses.
 */
struct onerma_io {
	struct rte_mempool *pool;
	struct rte_mbuf **tx;    /* tx[0..n_tx): frames queued for transmission */
	struct rte_mbuf **rx;    /* rx[0..n_rx): last burst received (held by Go); room for
	                          * burst from the port and burst from the inbound rings */
	struct rte_mbuf **stash; /* stash[0..n_stash): free mbufs for future tx */
	uint16_t port, queue;
	uint16_t burst;       /* capacity of tx and rx */
	uint16_t stash_cap;   /* capacity of stash; refilled to it when below stash_low */
	uint16_t stash_low;
	uint16_t tx_retries;  /* extra tx_burst attempts for frames the queue refused */
	uint16_t n_tx;        /* in: queued; out: 0 */
	uint16_t n_rx;        /* out */
	uint16_t n_stash;     /* in/out */
	uint16_t n_rx_port;   /* out: rx[0..n_rx_port) came from the port, the rest from in */
	struct rte_ring **in; /* inbound rings (onerma_io_set_inbound), NULL: none */
	uint16_t n_in;        /* how many */
	uint16_t in_max;      /* mbufs taken from them per receive (<= burst) */
	uint16_t in_next;     /* the ring the next receive starts from */
	uint16_t stamp;       /* in: nonzero: record tsc[] in every crossing */
	onerma_io_hook pre_tx;      /* in: run before a tx burst is sent (NULL: none) */
	void *pre_tx_arg;
	struct onerma_fanout *out;  /* in: what this queue hands to others, sent first by every
	                             * crossing that finds something queued in it (NULL: none) */
	/* out, with stamp: rte_rdtsc() at the phase boundaries of the last
	 * crossing (ONERMA_IO_T_*); a phase the crossing skipped is as short
	 * as reading the counter twice. */
	uint64_t tsc[ONERMA_IO_NTSC];
	/* Cumulative counters, written by onerma_port_io only. */
	uint64_t calls;
	uint64_t tx_pkts;
	uint64_t tx_dropped;  /* refused by the queue after all retries, freed */
	uint64_t rx_pkts;
	uint64_t alloc_fails; /* refills that could not fill the stash */
	uint64_t in_pkts;     /* mbufs taken from the inbound rings */
};

enum {
	ONERMA_IO_RX = 1, /* free the held rx burst, then receive a new one */
};

struct onerma_io *onerma_io_new(uint16_t port, uint16_t queue, struct rte_mempool *pool,
				uint16_t burst, uint16_t stash_cap);
/* Frees every mbuf the io still holds (tx, rx, stash) and the io itself. */
void onerma_io_free(struct onerma_io *io);
/* One poll step: the outbound fanout, the pre-transmit hook and tx, [free rx,]
 * refill, [rx]; with io->stamp, the time-stamp counter at each boundary in
 * io->tsc. Returns n_rx (0 without ONERMA_IO_RX). */
uint16_t onerma_port_io(struct onerma_io *io, int flags);

/* For benchmarks of the crossing itself. */
void onerma_noop(void);
/* For tests of the pre-transmit hook: adds one to the uint64_t at arg. */
void onerma_count_hook(void *arg);

#endif
