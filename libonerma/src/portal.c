/*
 * portal.c - opening, watching and closing a portal (Go: portal/portal.go
 * and portal/gone.go).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_TIMEOUT_MS 60000
#define DEFAULT_WAIT_SPINS 2000

static int valid_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > ONERMA_MAX_NAME_BYTES)
		return onr_fail(-ONERMA_E_INVALID, "name must be 1..%d bytes, got %zu", ONERMA_MAX_NAME_BYTES, n);
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return onr_fail(-ONERMA_E_INVALID, "name has byte %#02x at %zu; allowed: A-Z a-z 0-9 . _ -",
					(unsigned char)c, i);
	}
	return 0;
}

int onr_map_fd(int fd, uint64_t size, uint8_t **out)
{
	struct stat st;
	void *mem;
	int err = 0;
	/* Touching a mapping beyond the end of its file would be SIGBUS:
	 * check the file really is that large first. */
	if (fstat(fd, &st) != 0)
		err = onr_fail(-errno, "fstat of the engine's memfd: %s", strerror(errno));
	else if (size == 0 || size > ONERMA_MAX_REGION_BYTES || (uint64_t)st.st_size < size)
		err = onr_fail(-ONERMA_E_PROTOCOL, "the engine's memfd holds %lld bytes, its reply says map %llu",
			       (long long)st.st_size, (unsigned long long)size);
	else {
		/* MAP_POPULATE faults every page in: this process is charged
		 * for the memory, and the engine finds it all resident. */
		mem = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
		if (mem == MAP_FAILED)
			err = onr_fail(-errno, "mmap of %llu bytes: %s", (unsigned long long)size, strerror(errno));
		else
			*out = mem;
	}
	close(fd);
	return err;
}

void onr_mark_gone(struct onerma_portal *p)
{
	int expect = 0;
	if (!atomic_compare_exchange_strong_explicit(&p->gone, &expect, 1, memory_order_acq_rel, memory_order_acquire))
		return;
	/* Wake a wait asleep on the doorbell; close() joins this thread
	 * before it closes bell_fd. */
	if (p->bell_fd >= 0) {
		uint64_t one = 1;
		ssize_t n = write(p->bell_fd, &one, sizeof one);
		(void)n;
	}
}

/* The watcher: asleep in poll(2) on a duplicate of the control connection,
 * asking only for the hang-up (POLLRDHUP; POLLHUP and POLLERR always come),
 * so the replies that round trips read on the other descriptor never wake
 * it. stop_fd ends it. */
static void *watch(void *arg)
{
	struct onerma_portal *p = arg;
	struct pollfd pfd[2] = {{.fd = p->watch_fd, .events = POLLRDHUP}, {.fd = p->stop_fd, .events = POLLIN}};
	for (;;) {
		int n = poll(pfd, 2, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || pfd[1].revents)
			return NULL;
		if (pfd[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
			onr_mark_gone(p);
			return NULL;
		}
	}
}

static int start_watch(struct onerma_portal *p)
{
	int err;
	p->watch_fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
	if (p->watch_fd < 0)
		return onr_fail(-errno, "dup of the control connection: %s", strerror(errno));
	p->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (p->stop_fd < 0)
		return onr_fail(-errno, "eventfd: %s", strerror(errno));
	err = pthread_create(&p->watcher, NULL, watch, p);
	if (err != 0)
		return onr_fail(-err, "starting the watcher thread: %s", strerror(err));
	p->watching = true;
	return 0;
}

static void stop_watch(struct onerma_portal *p)
{
	if (p->watching) {
		uint64_t one = 1;
		ssize_t n = write(p->stop_fd, &one, sizeof one);
		(void)n;
		pthread_join(p->watcher, NULL);
		p->watching = false;
	}
	if (p->stop_fd >= 0)
		close(p->stop_fd);
	if (p->watch_fd >= 0)
		close(p->watch_fd);
	p->stop_fd = p->watch_fd = -1;
}

/* attach maps the segment the engine created, asks the engine to attach
 * it (the engine seals it, starts serving its rings and writes its
 * header), then validates the header against the replies and attaches to
 * the rings. */
static int attach(struct onerma_portal *p, const struct onr_reply *o, int fd)
{
	struct onr_request req = {.op = ONR_OP_ATTACH};
	struct onr_reply a;
	struct onr_layout l;
	int err;

	if (fd < 0)
		return onr_fail(-ONERMA_E_PROTOCOL, "open: the engine's reply has no segment");
	if ((err = onr_map_fd(fd, o->map_size, &p->seg)) != 0)
		return err;
	p->seg_map = o->map_size;
	if ((err = onr_round_trip(p, &req, &a, &fd)) != 0)
		return err;
	if (fd >= 0)
		close(fd);
	if ((err = onr_decode_layout(p->seg, (size_t)p->seg_map, &l)) != 0)
		return err;
	if (l.portal != a.portal || l.cmd_cap != o->cmd_cap || l.cpl_cap != o->cpl_cap || l.size != o->seg_size)
		return onr_fail(-ONERMA_E_PROTOCOL,
				"segment header (portal %u, rings %u/%u, %llu bytes) disagrees with the engine's replies "
				"(portal %u, rings %u/%u, %llu bytes)",
				l.portal, l.cmd_cap, l.cpl_cap, (unsigned long long)l.size, a.portal, o->cmd_cap,
				o->cpl_cap, (unsigned long long)o->seg_size);
	if (onr_ring_attach(&p->cmd, p->seg + l.cmd_off, l.cmd_cap, ONR_COMMAND_SIZE, true) != 0 ||
	    onr_ring_attach(&p->cpl, p->seg + l.cpl_off, l.cpl_cap, ONR_COMPLETION_SIZE, false) != 0)
		return onr_fail(-ONERMA_E_PROTOCOL, "attach: ring memory misaligned");
	/* A post naming a slot this portal does not own, or one busy, is
	 * recorded apart; the engine completes such posts as it takes them,
	 * so no more than cmd_cap + cpl_cap are ever pending. */
	p->stray_cap = l.cmd_cap + l.cpl_cap;
	p->stray = calloc(p->stray_cap, sizeof *p->stray);
	if (!p->stray)
		return onr_fail(-ENOMEM, "attach: out of memory");
	p->layout = l;
	p->portal_id = a.portal;
	p->core = a.core;
	p->max_slots = o->max_slots;
	p->hugetlb = o->hugetlb;
	p->service_class = o->service_class;
	p->ident = o->ident;
	return 0;
}

/* use_summary maps the summary doorbell whose memfd fd the engine passed
 * (and closes fd), and says in the segment that this portal rings it
 * (ONR_SEGMENT_SUMMARY_OFF). A reply that does not describe a summary
 * covering this portal leaves the portal without one. */
static void use_summary(struct onerma_portal *p, const struct onr_reply *r, int fd)
{
	uint8_t *mem;
	if (r->size / 8 <= p->portal_id / 64) {
		close(fd);
		return;
	}
	if (onr_map_fd(fd, r->map_size, &mem) != 0)
		return;
	p->sum_map = mem;
	p->sum_map_size = r->map_size;
	p->sum = (_Atomic uint64_t *)(void *)(mem + (size_t)(p->portal_id / 64) * 8);
	p->sum_mask = (uint64_t)1 << (p->portal_id % 64);
	/* From the engine's next fallback scan on, it reads the command ring
	 * only when flush rings. */
	atomic_store_explicit((_Atomic uint32_t *)(void *)(p->seg + ONR_SEGMENT_SUMMARY_OFF), ONR_SUMMARY_ON,
			      memory_order_seq_cst);
}

static void free_portal(struct onerma_portal *p)
{
	struct onerma_region *r = p->regions;
	while (r) {
		struct onerma_region *next = r->next;
		if (r->mapping)
			munmap(r->mapping, (size_t)r->map_size);
		explicit_bzero(r->kr, sizeof r->kr);
		pthread_mutex_destroy(&r->kmu);
		free(r);
		r = next;
	}
	if (p->sum_map)
		munmap(p->sum_map, (size_t)p->sum_map_size);
	if (p->seg)
		munmap(p->seg, (size_t)p->seg_map);
	if (p->bell_fd >= 0)
		close(p->bell_fd);
	free(p->path);
	free(p->rbuf);
	free(p->stray);
	free(p->pending);
	free(p->is_free);
	free(p->free_stack);
	free(p->stab);
	free(p);
}

int onerma_dial(const char *socket_path, const char *name, const struct onerma_options *opt,
		struct onerma_portal **out)
{
	struct onerma_options o = {0};
	struct onerma_portal *p;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct onr_request req = {.op = ONR_OP_OPEN};
	struct onr_reply open;
	struct timeval tv;
	int err, fd = -1;

	if (!out)
		return onr_fail(-ONERMA_E_INVALID, "dial: no place for the portal");
	*out = NULL;
	if (!socket_path)
		socket_path = ONERMA_DEFAULT_SOCKET;
	if (opt)
		o = *opt;
	if ((err = valid_name(name)) != 0)
		return err;
	if (o.service_class != ONERMA_CLASS_LOW && o.service_class != ONERMA_CLASS_HIGH)
		return onr_fail(-ONERMA_E_INVALID, "options.service_class = %d, want ONERMA_CLASS_LOW or _HIGH",
				o.service_class);
	if (o.pin_core && (o.core < 0 || o.core >= ONERMA_MAX_CORES))
		return onr_fail(-ONERMA_E_INVALID, "options.core = %d, want 0..%d", o.core, ONERMA_MAX_CORES - 1);
	if ((o.cmd_cap && (o.cmd_cap < 2 || o.cmd_cap > ONERMA_MAX_RING_CAP || (o.cmd_cap & (o.cmd_cap - 1)))) ||
	    (o.cpl_cap && (o.cpl_cap < 2 || o.cpl_cap > ONERMA_MAX_RING_CAP || (o.cpl_cap & (o.cpl_cap - 1)))))
		return onr_fail(-ONERMA_E_INVALID, "options.cmd_cap %u, cpl_cap %u: want powers of two 2..%d",
				o.cmd_cap, o.cpl_cap, ONERMA_MAX_RING_CAP);
	if (strlen(socket_path) >= sizeof sa.sun_path)
		return onr_fail(-ENAMETOOLONG, "socket path of %zu bytes", strlen(socket_path));

	p = calloc(1, sizeof *p);
	if (!p)
		return onr_fail(-ENOMEM, "dial: out of memory");
	p->fd = p->bell_fd = p->watch_fd = p->stop_fd = -1;
	p->opt = o;
	p->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
	p->spins = o.wait_spins == 0 ? DEFAULT_WAIT_SPINS : (o.wait_spins < 0 ? 0 : o.wait_spins);
	snprintf(p->name, sizeof p->name, "%s", name);
	p->path = strdup(socket_path);
	p->rbuf = malloc(ONR_MAX_RESPONSE_BYTES + 1);
	if (!p->path || !p->rbuf) {
		free_portal(p);
		return onr_fail(-ENOMEM, "dial: out of memory");
	}

	p->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (p->fd < 0) {
		err = onr_fail(-errno, "socket: %s", strerror(errno));
		goto fail;
	}
	tv.tv_sec = p->timeout_ms / 1000;
	tv.tv_usec = (p->timeout_ms % 1000) * 1000;
	setsockopt(p->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(p->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	memcpy(sa.sun_path, socket_path, strlen(socket_path));
	if (connect(p->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		err = onr_fail(-errno, "connecting to the engine at %s: %s", socket_path, strerror(errno));
		goto fail;
	}

	req.name = p->name;
	req.cmd_cap = o.cmd_cap;
	req.cpl_cap = o.cpl_cap;
	req.service_class = o.service_class;
	req.pin_core = o.pin_core != 0;
	req.core = (uint32_t)o.core;
	if ((err = onr_round_trip(p, &req, &open, &fd)) != 0)
		goto fail;
	if ((err = attach(p, &open, fd)) != 0)
		goto fail;

	/* The completion doorbell lets wait sleep instead of spin. An engine
	 * that cannot give one leaves wait to poll with backoff. */
	{
		struct onr_request bell = {.op = ONR_OP_DOORBELL};
		struct onr_reply r;
		int bfd = -1;
		err = onr_round_trip(p, &bell, &r, &bfd);
		if (err == 0 && bfd >= 0) {
			p->bell_fd = bfd;
			p->arm = (_Atomic uint32_t *)(void *)(p->seg + ONR_SEGMENT_ARM_OFF);
		} else if (err == -ONERMA_E_ENGINE_GONE || err == -ETIMEDOUT) {
			goto fail;
		}
	}
	/* The summary doorbell spares the engine a read of the command ring
	 * in every poll. An engine without one (an older one, or
	 * ctl.no_summary) refuses, and reads the ring in every poll. */
	{
		struct onr_request sreq = {.op = ONR_OP_SUMMARY};
		struct onr_reply r;
		int sfd = -1;
		err = onr_round_trip(p, &sreq, &r, &sfd);
		if (err == 0 && sfd >= 0)
			use_summary(p, &r, sfd);
		else if (sfd >= 0)
			close(sfd);
		if (err == -ONERMA_E_ENGINE_GONE || err == -ETIMEDOUT)
			goto fail;
	}
	if ((err = start_watch(p)) != 0)
		goto fail;
	*out = p;
	return 0;
fail:
	onerma_close(p);
	return err;
}

int onerma_close(struct onerma_portal *p)
{
	int err = 0;
	if (!p)
		return 0;
	/* The engine sees the connection close only once both descriptors
	 * are closed; and the watcher may ring the doorbell until it has
	 * returned. */
	stop_watch(p);
	if (p->fd >= 0 && close(p->fd) != 0)
		err = -errno;
	p->fd = -1;
	p->closed = true;
	free_portal(p);
	return err;
}

static bool engine_absent(int err)
{
	return err == -ENOENT || err == -ECONNREFUSED || err == -ECONNRESET || err == -EPIPE ||
	       err == -ONERMA_E_ENGINE_GONE || err == -ONERMA_E_UNAVAILABLE;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int onerma_redial(struct onerma_portal *p, int timeout_ms, struct onerma_portal **out)
{
	int64_t deadline = now_ms() + timeout_ms;
	int wait_ms = 1;
	if (!p || !out)
		return onr_fail(-ONERMA_E_INVALID, "redial: no portal");
	for (;;) {
		int err = onerma_dial(p->path, p->name, &p->opt, out);
		if (err == 0 || !engine_absent(err))
			return err;
		if (timeout_ms >= 0 && now_ms() + wait_ms > deadline)
			return onr_fail(-ETIMEDOUT, "redial %s: no engine within %d ms (last: %s)", p->path, timeout_ms,
					onerma_strerror(err));
		struct timespec ts = {.tv_sec = wait_ms / 1000, .tv_nsec = (long)(wait_ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
		wait_ms = wait_ms * 2 > 100 ? 100 : wait_ms * 2;
	}
}

void onerma_portal_identity(const struct onerma_portal *p, struct onerma_identity *out) { *out = p->ident; }
int onerma_portal_class(const struct onerma_portal *p) { return p->service_class; }
int onerma_portal_core(const struct onerma_portal *p) { return (int)p->core; }
int onerma_portal_max_slots(const struct onerma_portal *p) { return p->max_slots; }
int onerma_portal_hugetlb(const struct onerma_portal *p) { return p->hugetlb; }
int onerma_portal_doorbell(const struct onerma_portal *p) { return p->arm != NULL; }
int onerma_portal_summary(const struct onerma_portal *p) { return p->sum != NULL; }
uint32_t onerma_portal_cmd_cap(const struct onerma_portal *p) { return p->layout.cmd_cap; }
uint32_t onerma_portal_cpl_cap(const struct onerma_portal *p) { return p->layout.cpl_cap; }

int onerma_gone(const struct onerma_portal *p)
{
	return atomic_load_explicit(&((struct onerma_portal *)p)->gone, memory_order_acquire) != 0;
}

int onerma_alloc_slots(struct onerma_portal *p, uint32_t n, uint32_t *slots)
{
	struct onr_request req = {.op = ONR_OP_ALLOC_SLOTS, .n = n};
	struct onr_reply r;
	uint32_t *got;
	int err, fd;
	if (n < 1 || n > ONERMA_MAX_ALLOC_SLOTS)
		return onr_fail(-ONERMA_E_INVALID, "alloc_slots: n = %u, want 1..%d", n, ONERMA_MAX_ALLOC_SLOTS);
	got = malloc(n * sizeof *got);
	if (!got)
		return onr_fail(-ENOMEM, "alloc_slots: out of memory");
	r.slots = got;
	r.want_slots = n;
	err = onr_round_trip(p, &req, &r, &fd);
	if (fd >= 0)
		close(fd);
	if (err == 0)
		err = onr_slots_add(p, got, n);
	if (err == 0 && slots)
		memcpy(slots, got, n * sizeof *got);
	free(got);
	return err;
}

int onerma_moderate(struct onerma_portal *p, uint32_t count, uint32_t period_us)
{
	struct onr_request req = {.op = ONR_OP_MODERATE, .count = count, .period_us = period_us};
	struct onr_reply r;
	int err, fd;
	if (!p->arm)
		return onr_fail(-ONERMA_E_STATE, "moderate: the portal has no completion doorbell");
	if (count < 1 || count > ONERMA_MAX_RING_CAP || period_us > ONERMA_MAX_MODERATION_US || (count > 1 && period_us == 0))
		return onr_fail(-ONERMA_E_INVALID, "moderate: count %u, period %u us: want count 1..%d and period 0..%d us, not 0 when count > 1",
				count, period_us, ONERMA_MAX_RING_CAP, ONERMA_MAX_MODERATION_US);
	err = onr_round_trip(p, &req, &r, &fd);
	if (fd >= 0)
		close(fd);
	return err;
}

uint32_t onerma_slots(const struct onerma_portal *p) { return p->nslots; }
uint32_t onerma_free_slots(const struct onerma_portal *p) { return p->nfree; }

int onerma_slot_take(struct onerma_portal *p, uint32_t *slot)
{
	uint32_t s;
	if (p->nfree == 0)
		return -ONERMA_E_SLOT;
	s = p->free_stack[--p->nfree];
	p->is_free[onr_slot_index(p, s)] = false;
	*slot = s;
	return 0;
}

int onerma_slot_release(struct onerma_portal *p, uint32_t slot)
{
	int32_t i = onr_slot_index(p, slot);
	if (i < 0 || p->is_free[i])
		return -ONERMA_E_SLOT;
	p->is_free[i] = true;
	p->free_stack[p->nfree++] = slot; /* never beyond nslots */
	return 0;
}
