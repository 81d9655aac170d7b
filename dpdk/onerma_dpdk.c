/* onerma_dpdk.c: see onerma_dpdk.h. */
#include "onerma_dpdk.h"
#include "onerma_ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stdio.h>

#include <rte_branch_prediction.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ring.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>

/* rte_errno may be 0 after a failure in some paths; never report success. */
static int errno_or(int fallback)
{
	return rte_errno > 0 ? rte_errno : fallback;
}

/* ---- EAL ---- */

int onerma_eal_init(int argc, char **argv)
{
	int r = rte_eal_init(argc, argv);
	return r < 0 ? -errno_or(EINVAL) : r;
}

int onerma_eal_cleanup(void)
{
	int r = rte_eal_cleanup();
	return r < 0 ? -errno_or(-r > 0 ? -r : EINVAL) : 0;
}

const char *onerma_strerror(int err) { return rte_strerror(err); }

int onerma_thread_register(void)
{
	if (rte_thread_register() < 0)
		return -errno_or(ENOMEM);
	return (int)rte_lcore_id();
}

void onerma_thread_unregister(void) { rte_thread_unregister(); }
unsigned int onerma_lcore_id(void) { return rte_lcore_id(); }
unsigned int onerma_main_lcore(void) { return rte_get_main_lcore(); }
unsigned int onerma_lcore_count(void) { return rte_lcore_count(); }
unsigned int onerma_socket_id(void) { return rte_socket_id(); }
unsigned int onerma_socket_count(void) { return rte_socket_count(); }
int onerma_lcore_socket(unsigned int lcore) { return (int)rte_lcore_to_socket_id(lcore); }

/* ---- mempools ---- */

struct onerma_ptr_result onerma_pktmbuf_pool_create(const char *name, unsigned int n,
						    unsigned int cache_size, uint16_t priv_size,
						    uint16_t data_room_size, int socket_id)
{
	struct onerma_ptr_result r;
	r.p = rte_pktmbuf_pool_create(name, n, cache_size, priv_size, data_room_size, socket_id);
	r.err = r.p == NULL ? errno_or(ENOMEM) : 0;
	return r;
}

static void memzone_free_cb(struct rte_mempool_memhdr *memhdr, void *opaque)
{
	(void)memhdr;
	rte_memzone_free(opaque);
}

/* rte_pktmbuf_pool_create_by_ops (lib/mbuf/rte_mbuf.c) with objects of exactly
 * one page (RTE_MEMPOOL_F_NO_SPREAD: no padding beyond the cache line) in a
 * page-aligned memzone, populated page by page (rte_mempool_populate_virt): the
 * objects lie back to back, each within its page, and their IO addresses are
 * right. */
struct onerma_ptr_result onerma_pktmbuf_pool_create_paged(const char *name, unsigned int n,
							  unsigned int cache_size, int socket_id)
{
	struct onerma_ptr_result r = {NULL, 0};
	struct rte_pktmbuf_pool_private priv;
	char mz_name[RTE_MEMZONE_NAMESIZE];
	const struct rte_memzone *mz;
	struct rte_mempool *mp;
	size_t pg = (size_t)getpagesize();
	unsigned int elt;
	int ret;

	elt = (unsigned int)pg - RTE_ALIGN_CEIL(sizeof(struct rte_mempool_objhdr), RTE_MEMPOOL_ALIGN);
	if (pg > UINT16_MAX + sizeof(struct rte_mbuf) ||
	    rte_mempool_calc_obj_size(elt, RTE_MEMPOOL_F_NO_SPREAD, NULL) != pg) {
		r.err = EINVAL; /* a debug build's object trailer, or pages too large for a data room */
		return r;
	}
	if (snprintf(mz_name, sizeof(mz_name), "%s_pages", name) >= (int)sizeof(mz_name)) {
		r.err = ENAMETOOLONG;
		return r;
	}
	memset(&priv, 0, sizeof(priv));
	priv.mbuf_data_room_size = (uint16_t)(elt - sizeof(struct rte_mbuf));
	mp = rte_mempool_create_empty(name, n, elt, cache_size, sizeof(struct rte_pktmbuf_pool_private),
				      socket_id, RTE_MEMPOOL_F_NO_SPREAD);
	if (mp == NULL) {
		r.err = errno_or(ENOMEM);
		return r;
	}
	ret = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), NULL);
	if (ret != 0)
		goto fail;
	rte_pktmbuf_pool_init(mp, &priv);
	mz = rte_memzone_reserve_aligned(mz_name, (size_t)n * pg, socket_id, 0, pg);
	if (mz == NULL) {
		ret = -errno_or(ENOMEM);
		goto fail;
	}
	ret = rte_mempool_populate_virt(mp, mz->addr, (size_t)n * pg, pg, memzone_free_cb, (void *)(uintptr_t)mz);
	if (ret >= 0 && mp->populated_size != n)
		ret = -ENOBUFS;
	if (ret < 0) {
		if (mp->nb_mem_chunks == 0) /* else the first chunk's free_cb frees it */
			rte_memzone_free(mz);
		goto fail;
	}
	rte_mempool_obj_iter(mp, rte_pktmbuf_init, NULL);
	r.p = mp;
	return r;
fail:
	rte_mempool_free(mp);
	r.err = -ret;
	return r;
}

struct array_check {
	uintptr_t lo, hi;
	size_t obj_size;
	unsigned int outside;
};

static void array_check_cb(struct rte_mempool *mp, void *opaque, void *obj, unsigned int idx)
{
	struct array_check *c = opaque;
	uintptr_t start = (uintptr_t)obj - mp->header_size;
	(void)idx;
	if (start < c->lo || start + c->obj_size > c->hi)
		c->outside++;
}

/* The umem of drivers/net/af_xdp/rte_eth_af_xdp.c, v22.11 (xdp_umem_configure,
 * get_base_addr): from the first memory chunk's address rounded down to a page,
 * populated_size frames of rte_mempool_calc_obj_size bytes, plus that rounding. */
unsigned int onerma_mempool_outside_array(struct rte_mempool *mp)
{
	struct rte_mempool_memhdr *first = STAILQ_FIRST(&mp->mem_list);
	struct array_check c;
	uintptr_t addr;

	if (first == NULL)
		return 0;
	addr = (uintptr_t)first->addr;
	c.obj_size = rte_mempool_calc_obj_size(mp->elt_size, mp->flags, NULL);
	c.lo = addr & ~((uintptr_t)getpagesize() - 1);
	c.hi = addr + (uintptr_t)mp->populated_size * c.obj_size;
	c.outside = 0;
	rte_mempool_obj_iter(mp, array_check_cb, &c);
	return c.outside;
}

unsigned int onerma_mempool_header_size(const struct rte_mempool *mp) { return mp->header_size; }

unsigned int onerma_mempool_obj_size(const struct rte_mempool *mp)
{
	return mp->header_size + mp->elt_size + mp->trailer_size;
}

void onerma_mempool_free(struct rte_mempool *mp) { rte_mempool_free(mp); }
unsigned int onerma_mempool_avail(const struct rte_mempool *mp) { return rte_mempool_avail_count(mp); }
unsigned int onerma_mempool_in_use(const struct rte_mempool *mp) { return rte_mempool_in_use_count(mp); }
uint16_t onerma_pktmbuf_data_room_size(struct rte_mempool *mp) { return rte_pktmbuf_data_room_size(mp); }

struct mem_chunks {
	struct onerma_mem_chunk *out;
	unsigned int max, n;
};

static void mem_chunk_cb(struct rte_mempool *mp, void *opaque, struct rte_mempool_memhdr *memhdr,
			 unsigned int mem_idx)
{
	struct mem_chunks *c = opaque;
	(void)mp;
	(void)mem_idx;
	if (c->n < c->max) {
		c->out[c->n].addr = memhdr->addr;
		c->out[c->n].len = memhdr->len;
	}
	c->n++;
}

unsigned int onerma_mempool_mem_chunks(struct rte_mempool *mp, struct onerma_mem_chunk *out, unsigned int max)
{
	struct mem_chunks c = { out, max, 0 };
	rte_mempool_mem_iter(mp, mem_chunk_cb, &c);
	return c.n;
}

/* ---- ethdev ---- */

int onerma_eth_port_by_name(const char *name)
{
	uint16_t port;
	int r = rte_eth_dev_get_port_by_name(name, &port);
	return r < 0 ? r : (int)port;
}

int onerma_eth_port_name(uint16_t port, char *name) { return rte_eth_dev_get_name_by_port(port, name); }
unsigned int onerma_eth_count_avail(void) { return rte_eth_dev_count_avail(); }
int onerma_eth_valid(uint16_t port) { return rte_eth_dev_is_valid_port(port); }

int onerma_eth_socket(uint16_t port)
{
	int s = rte_eth_dev_socket_id(port);
	/* -1 is both "unknown NUMA node" (SOCKET_ID_ANY) and, with rte_errno
	 * set, "invalid port"; the caller checks validity first. */
	return s;
}

int onerma_eth_configure(uint16_t port, uint16_t nb_rx, uint16_t nb_tx, uint32_t mtu, int rss, uint64_t *rss_hf)
{
	struct rte_eth_conf conf;
	struct rte_eth_dev_info di;
	uint64_t hf = 0;
	int r;

	memset(&conf, 0, sizeof(conf));
	conf.rxmode.mtu = mtu;
	if (rss && nb_rx > 1) {
		r = rte_eth_dev_info_get(port, &di);
		if (r < 0)
			return r;
		hf = (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP) & di.flow_type_rss_offloads;
		if (hf != 0) {
			conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
			conf.rx_adv_conf.rss_conf.rss_hf = hf;
		}
	}
	r = rte_eth_dev_configure(port, nb_rx, nb_tx, &conf);
	*rss_hf = r == 0 ? hf : 0;
	return r;
}

int onerma_eth_rss_hashes(uint16_t port, uint64_t *rss_hf)
{
	struct rte_eth_rss_conf c;
	int r;
	memset(&c, 0, sizeof(c)); /* rss_key NULL: the key is not wanted */
	r = rte_eth_dev_rss_hash_conf_get(port, &c);
	*rss_hf = r == 0 ? c.rss_hf : 0;
	return r;
}

int onerma_eth_rxq_setup(uint16_t port, uint16_t q, uint16_t nb_desc, int socket,
			 struct rte_mempool *mp)
{
	return rte_eth_rx_queue_setup(port, q, nb_desc, (unsigned int)socket, NULL, mp);
}

int onerma_eth_txq_setup(uint16_t port, uint16_t q, uint16_t nb_desc, int socket)
{
	return rte_eth_tx_queue_setup(port, q, nb_desc, (unsigned int)socket, NULL);
}

int onerma_eth_start(uint16_t port) { return rte_eth_dev_start(port); }
int onerma_eth_stop(uint16_t port) { return rte_eth_dev_stop(port); }
int onerma_eth_close(uint16_t port) { return rte_eth_dev_close(port); }

int onerma_eth_macaddr(uint16_t port, uint8_t mac[6])
{
	struct rte_ether_addr a;
	int r = rte_eth_macaddr_get(port, &a);
	if (r == 0)
		memcpy(mac, a.addr_bytes, 6);
	return r;
}

int onerma_eth_link(uint16_t port, struct onerma_link *l)
{
	struct rte_eth_link link;
	int r;
	memset(&link, 0, sizeof(link));
	r = rte_eth_link_get_nowait(port, &link);
	if (r < 0)
		return r;
	l->speed_mbps = link.link_speed;
	l->up = link.link_status == RTE_ETH_LINK_UP;
	l->full_duplex = link.link_duplex == RTE_ETH_LINK_FULL_DUPLEX;
	l->autoneg = link.link_autoneg == RTE_ETH_LINK_AUTONEG;
	return 0;
}

int onerma_eth_set_mtu(uint16_t port, uint16_t mtu) { return rte_eth_dev_set_mtu(port, mtu); }
int onerma_eth_get_mtu(uint16_t port, uint16_t *mtu) { return rte_eth_dev_get_mtu(port, mtu); }

int onerma_eth_promiscuous(uint16_t port, int enable)
{
	return enable ? rte_eth_promiscuous_enable(port) : rte_eth_promiscuous_disable(port);
}

int onerma_eth_stats(uint16_t port, struct onerma_eth_stats *s)
{
	struct rte_eth_stats st;
	int r = rte_eth_stats_get(port, &st);
	if (r < 0)
		return r;
	s->ipackets = st.ipackets;
	s->opackets = st.opackets;
	s->ibytes = st.ibytes;
	s->obytes = st.obytes;
	s->imissed = st.imissed;
	s->ierrors = st.ierrors;
	s->oerrors = st.oerrors;
	s->rx_nombuf = st.rx_nombuf;
	return 0;
}

int onerma_eth_queue_stats(uint16_t port, uint16_t q, struct onerma_eth_stats *s)
{
	struct rte_eth_stats st;
	int r;
	if (q >= RTE_ETHDEV_QUEUE_STAT_CNTRS)
		return -EINVAL;
	r = rte_eth_stats_get(port, &st);
	if (r < 0)
		return r;
	memset(s, 0, sizeof(*s));
	s->ipackets = st.q_ipackets[q];
	s->opackets = st.q_opackets[q];
	s->ibytes = st.q_ibytes[q];
	s->obytes = st.q_obytes[q];
	s->ierrors = st.q_errors[q];
	return 0;
}

int onerma_eth_info(uint16_t port, struct onerma_dev_info *info)
{
	struct rte_eth_dev_info di;
	int r = rte_eth_dev_info_get(port, &di);
	if (r < 0)
		return r;
	memset(info, 0, sizeof(*info));
	if (di.driver_name != NULL)
		strncpy(info->driver, di.driver_name, sizeof(info->driver) - 1);
	info->min_mtu = di.min_mtu;
	info->max_mtu = di.max_mtu;
	info->max_rx_pktlen = di.max_rx_pktlen;
	info->max_rx_queues = di.max_rx_queues;
	info->max_tx_queues = di.max_tx_queues;
	info->rss_offloads = di.flow_type_rss_offloads;
	return 0;
}

int onerma_ring_pair(const char *name_a, const char *name_b, unsigned int size, uint16_t queues, int socket,
		     uint16_t *a, uint16_t *b)
{
	char rn[RTE_RING_NAMESIZE];
	struct rte_ring *ab[RTE_PMD_RING_MAX_RX_RINGS], *ba[RTE_PMD_RING_MAX_RX_RINGS];
	unsigned int node = socket < 0 ? 0 : (unsigned int)socket;
	int pa, pb, err = 0;
	uint16_t q, made = 0;

	if (queues == 0 || queues > RTE_PMD_RING_MAX_RX_RINGS)
		return -EINVAL;
	/* Ring names are global: derive them from the (unique) port names.
	 * Queue q of a sends on ab[q], which is queue q of b's rx, and the
	 * other way round. */
	for (q = 0; q < queues; q++, made++) {
		if (snprintf(rn, sizeof(rn), "%s>%u", name_a, q) >= (int)sizeof(rn)) {
			err = ENAMETOOLONG;
			break;
		}
		ab[q] = rte_ring_create(rn, size, socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (ab[q] == NULL) {
			err = errno_or(ENOMEM);
			break;
		}
		if (snprintf(rn, sizeof(rn), "%s<%u", name_a, q) >= (int)sizeof(rn)) {
			rte_ring_free(ab[q]);
			err = ENAMETOOLONG;
			break;
		}
		ba[q] = rte_ring_create(rn, size, socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (ba[q] == NULL) {
			err = errno_or(ENOMEM);
			rte_ring_free(ab[q]);
			break;
		}
	}
	if (err == 0) {
		pa = rte_eth_from_rings(name_a, ba, queues, ab, queues, node);
		if (pa < 0)
			err = errno_or(EINVAL);
	}
	if (err != 0) {
		for (q = 0; q < made; q++) {
			rte_ring_free(ab[q]);
			rte_ring_free(ba[q]);
		}
		return -err;
	}
	pb = rte_eth_from_rings(name_b, ab, queues, ba, queues, node);
	if (pb < 0) {
		/* Port a stays (closing a vdev made this way is not supported
		 * by net_ring); its rings with it. */
		return -errno_or(EINVAL);
	}
	*a = (uint16_t)pa;
	*b = (uint16_t)pb;
	return 0;
}

/* ---- bursts ---- */

uint16_t onerma_rx_burst(uint16_t port, uint16_t q, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, q, pkts, n);
}

uint16_t onerma_tx_burst(uint16_t port, uint16_t q, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, q, pkts, n);
}

int onerma_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **pkts, unsigned int n)
{
	return rte_pktmbuf_alloc_bulk(mp, pkts, n);
}

void onerma_free_bulk(struct rte_mbuf **pkts, unsigned int n) { rte_pktmbuf_free_bulk(pkts, n); }
void onerma_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }

/* ---- fused io ---- */

struct onerma_io *onerma_io_new(uint16_t port, uint16_t queue, struct rte_mempool *pool,
				uint16_t burst, uint16_t stash_cap)
{
	struct onerma_io *io;
	/* Plain malloc, not rte_malloc: the arrays hold pointers only, and
	 * the io must be usable with any memory mode of the EAL. */
	io = calloc(1, sizeof(*io));
	if (io == NULL)
		return NULL;
	io->tx = calloc(burst, sizeof(*io->tx));
	io->rx = calloc(2 * (size_t)burst, sizeof(*io->rx));
	io->stash = calloc(stash_cap, sizeof(*io->stash));
	if (io->tx == NULL || io->rx == NULL || io->stash == NULL) {
		free(io->tx);
		free(io->rx);
		free(io->stash);
		free(io);
		return NULL;
	}
	io->pool = pool;
	io->port = port;
	io->queue = queue;
	io->burst = burst;
	io->stash_cap = stash_cap;
	io->stash_low = stash_cap / 2 > 0 ? stash_cap / 2 : 1;
	return io;
}

void onerma_io_free(struct onerma_io *io)
{
	if (io == NULL)
		return;
	rte_pktmbuf_free_bulk(io->tx, io->n_tx);
	rte_pktmbuf_free_bulk(io->rx, io->n_rx);
	rte_pktmbuf_free_bulk(io->stash, io->n_stash);
	free(io->tx);
	free(io->rx);
	free(io->stash);
	free(io->in);
	free(io);
}

static void io_refill(struct onerma_io *io)
{
	unsigned int want = io->stash_cap - io->n_stash;
	if (rte_pktmbuf_alloc_bulk(io->pool, io->stash + io->n_stash, want) == 0) {
		io->n_stash = io->stash_cap;
		return;
	}
	/* Bulk allocation is all-or-nothing; near exhaustion take what is left
	 * one by one so the port can still send. */
	io->alloc_fails++;
	while (io->n_stash < io->stash_cap) {
		struct rte_mbuf *m = rte_pktmbuf_alloc(io->pool);
		if (m == NULL)
			break;
		io->stash[io->n_stash++] = m;
	}
}

/* One poll step (onerma_port_io). stamp is a constant where it is inlined:
 * without it, the stamps compile away. */
static inline __attribute__((always_inline)) uint16_t port_io(struct onerma_io *io, int flags,
							      const int stamp)
{
	uint16_t n = io->n_tx;

#define IO_STAMP(i)                                    \
	do {                                           \
		if (stamp)                             \
			io->tsc[(i)] = rte_rdtsc();    \
	} while (0)

	IO_STAMP(ONERMA_IO_T_START);
	io->calls++;
	/* The frames handed to other queues since the last crossing, before
	 * the rx burst they came in (whose broadcast mbufs they reference) is
	 * freed below. */
	if (io->out != NULL && io->out->queued > 0)
		onerma_fanout_flush(io->out);
	IO_STAMP(ONERMA_IO_T_PRE_TX);
	if (n > 0) {
		if (io->pre_tx != NULL)
			io->pre_tx(io->pre_tx_arg);
		IO_STAMP(ONERMA_IO_T_TX);
		uint16_t sent = rte_eth_tx_burst(io->port, io->queue, io->tx, n);
		unsigned int tries = 0;
		while (sent < n && tries < io->tx_retries) {
			sent += rte_eth_tx_burst(io->port, io->queue, io->tx + sent, n - sent);
			tries++;
		}
		if (sent < n) {
			rte_pktmbuf_free_bulk(io->tx + sent, n - sent);
			io->tx_dropped += n - sent;
		}
		io->tx_pkts += sent;
		io->n_tx = 0;
	} else if (stamp) {
		io->tsc[ONERMA_IO_T_TX] = io->tsc[ONERMA_IO_T_PRE_TX];
	}
	IO_STAMP(ONERMA_IO_T_SENT);
	if (flags & ONERMA_IO_RX) {
		/* Free the previous burst first: its mbufs go back to this
		 * lcore's mempool cache, where the refill below finds them. */
		if (io->n_rx > 0) {
			rte_pktmbuf_free_bulk(io->rx, io->n_rx);
			io->n_rx = 0;
		}
	}
	IO_STAMP(ONERMA_IO_T_FREED);
	if (io->n_stash < io->stash_low)
		io_refill(io);
	IO_STAMP(ONERMA_IO_T_REFILLED);
	if (flags & ONERMA_IO_RX) {
		uint16_t n = rte_eth_rx_burst(io->port, io->queue, io->rx, io->burst);
		io->rx_pkts += n;
		io->n_rx_port = n;
		if (io->n_in > 0) {
			/* Frames other queues' pollers handed to this one. A
			 * different first ring each time: none starves. */
			unsigned int got = 0, k;
			for (k = 0; k < io->n_in && got < io->in_max; k++) {
				struct rte_ring *r = io->in[(io->in_next + k) % io->n_in];
				got += rte_ring_dequeue_burst(r, (void **)(io->rx + n + got), io->in_max - got, NULL);
			}
			io->in_next = (uint16_t)((io->in_next + 1) % io->n_in);
			io->in_pkts += got;
			n += (uint16_t)got;
		}
		io->n_rx = n;
		IO_STAMP(ONERMA_IO_T_END);
		return n;
	}
	IO_STAMP(ONERMA_IO_T_END);
	return 0;
#undef IO_STAMP
}

uint16_t onerma_port_io(struct onerma_io *io, int flags)
{
	/* One branch when no one asked for the stamps. */
	if (unlikely(io->stamp))
		return port_io(io, flags, 1);
	return port_io(io, flags, 0);
}

void onerma_noop(void) {}

void onerma_count_hook(void *arg) { (*(uint64_t *)arg)++; }
