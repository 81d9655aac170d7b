/*
 * data.c - the data path (Go: portal/data.go and abi/ring.go): post,
 * flush, poll and wait. No allocation, no lock and no system call but in
 * wait's sleep.
 *
 * Memory ordering, each atomic with its counterpart in the engine:
 *  - command ring producer index: stored with release after the commands
 *    are written (flush); the engine loads it and then reads the commands.
 *  - command ring consumer index: loaded with acquire (ring_free); the
 *    engine stores it after it has copied the commands out, so a slot seen
 *    free is no longer read.
 *  - completion ring producer index: loaded with acquire (ring_peek); the
 *    engine stores it after writing the completions.
 *  - completion ring consumer index: stored with release after the
 *    completions are copied out; the engine loads it before reusing them.
 *  - arm word: stored 1 and the producer index re-loaded, both
 *    sequentially consistent; the engine, after its producer store, loads
 *    the arm word and swaps 1 to 0 (both sequentially consistent) and
 *    writes the doorbell. Either it sees the 1, or the re-load here sees
 *    its completions: no wake-up is lost.
 *  - engine-gone flag: loaded with acquire once per post and per poll; set
 *    by the watcher thread, which then writes the doorbell.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define WAIT_BELL_MAX_MS 10   /* wake now and then, whatever happens */
#define WAIT_SLEEP_MIN_NS 1000L /* backoff without a doorbell */
#define WAIT_SLEEP_MAX_NS 1000000L

/* ring_free refreshes the consumer index (the producer's view). An index
 * not within [next - cap, next] marks the ring corrupt. */
static uint32_t ring_free(struct onr_ring *r)
{
	uint32_t c;
	if (r->corrupt)
		return 0;
	c = atomic_load_explicit(r->cons, memory_order_acquire);
	if (r->next - c > r->cap) {
		r->corrupt = true;
		return 0;
	}
	r->cache = c;
	return r->cap - (r->next - c);
}

static uint8_t *ring_reserve(struct onr_ring *r)
{
	if (r->next - r->cache >= r->cap && ring_free(r) == 0)
		return NULL;
	return r->entries + (size_t)(r->next & r->mask) * r->esize;
}

/* ring_peek returns the next published entry (the consumer's view), or
 * NULL. A producer index more than cap ahead marks the ring corrupt. */
static uint8_t *ring_peek(struct onr_ring *r)
{
	if (r->next == r->cache) {
		uint32_t p;
		if (r->corrupt)
			return NULL;
		p = atomic_load_explicit(r->prod, memory_order_acquire);
		if (p - r->next > r->cap) {
			r->corrupt = true;
			return NULL;
		}
		r->cache = p;
		if (r->next == p)
			return NULL;
	}
	return r->entries + (size_t)(r->next & r->mask) * r->esize;
}

int onerma_post(struct onerma_portal *p, const struct onerma_op *op)
{
	uint32_t length = op->length;
	const struct onerma_region *local = op->local;
	struct onr_command cmd;
	uint8_t *b;

	if (op->type != ONERMA_OP_LOOKUP && (op->tag != 0 || op->flags != 0))
		return -ONERMA_E_OP;
	switch (op->type) {
	case ONERMA_OP_READ:
	case ONERMA_OP_WRITE:
		break;
	case ONERMA_OP_LOOKUP:
		if (op->remote_offset > ONERMA_MAX_LOOKUP_REGION_BYTES || (op->flags & ~(uint32_t)ONERMA_FLAG_LOOKUP_BUCKET) != 0)
			return -ONERMA_E_OP;
		break;
	case ONERMA_OP_REKEY:
		if (op->remote_offset != 0)
			return -ONERMA_E_OP;
		if (length == 0)
			length = ONERMA_KEY_SIZE;
		else if (length != ONERMA_KEY_SIZE)
			return -ONERMA_E_LENGTH;
		break;
	default:
		return -ONERMA_E_OP;
	}
	if (!local || local->p != p || !local->mapping)
		return -ONERMA_E_REGION;
	if (length == 0 || length > ONERMA_MAX_OP_BYTES)
		return -ONERMA_E_LENGTH;
	if (op->local_offset > local->size || length > local->size - op->local_offset)
		return -ONERMA_E_BOUNDS;
	if (atomic_load_explicit(&p->gone, memory_order_acquire))
		return -ONERMA_E_ENGINE_GONE;
	b = ring_reserve(&p->cmd);
	if (!b)
		return p->cmd.corrupt ? -ONERMA_E_RING_CORRUPT : -ONERMA_E_RING_FULL;
	cmd.op = (uint8_t)op->type;
	cmd.flags = (uint8_t)op->flags;
	cmd.slot = op->slot;
	cmd.cookie = op->cookie;
	cmd.remote_addr = op->remote_addr;
	cmd.remote_region = op->remote_region;
	cmd.remote_offset = op->remote_offset;
	cmd.local_region = local->id;
	cmd.length = length;
	cmd.local_offset = op->local_offset;
	memcpy(cmd.key, op->key, ONERMA_KEY_SIZE);
	cmd.tag = op->tag;
	if (!onr_record(p, &cmd))
		return -ONERMA_E_RING_FULL;
	onr_encode_command(&cmd, b);
	p->cmd.next++;
	return 0;
}

void onerma_flush(struct onerma_portal *p)
{
	/* One store publishes every staged command (doorbell batching). */
	if (atomic_load_explicit(p->cmd.prod, memory_order_relaxed) == p->cmd.next)
		return;
	if (!p->sum) {
		atomic_store_explicit(p->cmd.prod, p->cmd.next, memory_order_release);
		return;
	}
	/* Then the summary doorbell: the portal's bit, set only when clear.
	 * The index's store and the word's load are sequentially consistent,
	 * so the load cannot come first: if it sees the bit set, the engine
	 * takes it later and then sees this index. */
	atomic_store_explicit(p->cmd.prod, p->cmd.next, memory_order_seq_cst);
	if (!(atomic_load_explicit(p->sum, memory_order_seq_cst) & p->sum_mask))
		atomic_fetch_or_explicit(p->sum, p->sum_mask, memory_order_seq_cst);
}

int onerma_submit(struct onerma_portal *p, const struct onerma_op *op)
{
	int err = onerma_post(p, op);
	if (err == 0)
		onerma_flush(p);
	return err;
}

uint32_t onerma_staged(const struct onerma_portal *p)
{
	uint32_t c = atomic_load_explicit(p->cmd.cons, memory_order_acquire);
	return p->cmd.next - c > p->cmd.cap ? 0 : p->cmd.next - c;
}

int onerma_poll(struct onerma_portal *p, struct onerma_completion *out, int n)
{
	int k = 0;
	if (n <= 0)
		return 0;
	/* One atomic load per call. The engine wrote its last completion
	 * before its control connection closed (a shutting-down engine
	 * reclaims the portal first; a dead one writes nothing), so from
	 * here the ring is drained once and then left alone. */
	if (!p->dead)
		p->dead = atomic_load_explicit(&p->gone, memory_order_acquire) != 0;
	if (!p->drained) {
		uint8_t *b;
		while (k < n && (b = ring_peek(&p->cpl)) != NULL) {
			onr_decode_completion(b, &out[k]);
			p->cpl.next++;
			onr_settle(p, &out[k]);
			k++;
		}
		if (k > 0) /* one store frees the batch for the engine */
			atomic_store_explicit(p->cpl.cons, p->cpl.next, memory_order_release);
		if (!p->dead || k == n) {
			if (k == 0 && p->cpl.corrupt)
				return -ONERMA_E_RING_CORRUPT;
			return k;
		}
		p->drained = true;
	}
	k += onr_synthesize(p, out + k, n - k);
	return k > 0 ? k : -ONERMA_E_ENGINE_GONE;
}

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int onerma_wait(struct onerma_portal *p, struct onerma_completion *out, int n, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : mono_ns() + (int64_t)timeout_ms * 1000000;
	long sleep_ns = WAIT_SLEEP_MIN_NS;
	int k;

	if (n <= 0)
		return 0;
	for (int i = 0; i < p->spins; i++)
		if ((k = onerma_poll(p, out, n)) != 0)
			return k;
	for (;;) {
		int64_t now = mono_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		if (!p->arm) {
			long ns = sleep_ns;
			if (deadline - now < ns)
				ns = (long)(deadline - now);
			struct timespec ts = {.tv_sec = 0, .tv_nsec = ns};
			nanosleep(&ts, NULL);
			sleep_ns = sleep_ns * 2 > WAIT_SLEEP_MAX_NS ? WAIT_SLEEP_MAX_NS : sleep_ns * 2;
		} else {
			struct pollfd pfd = {.fd = p->bell_fd, .events = POLLIN};
			int64_t ms = WAIT_BELL_MAX_MS;
			atomic_store_explicit(p->arm, 1, memory_order_seq_cst);
			/* The re-check: sequentially consistent, so it cannot be
			 * ordered before the arm store (poll's own load then reads
			 * this value or a later one). */
			(void)atomic_load_explicit(p->cpl.prod, memory_order_seq_cst);
			if ((k = onerma_poll(p, out, n)) != 0) {
				atomic_store_explicit(p->arm, 0, memory_order_seq_cst);
				return k;
			}
			if ((deadline - now) / 1000000 + 1 < ms)
				ms = (deadline - now) / 1000000 + 1;
			if (poll(&pfd, 1, (int)ms) > 0 && (pfd.revents & POLLIN)) {
				uint64_t v;
				ssize_t r = read(p->bell_fd, &v, sizeof v); /* resets the eventfd counter */
				(void)r;
			}
		}
		if ((k = onerma_poll(p, out, n)) != 0)
			return k;
	}
}
