/*
 * fake_engine.c - see fake_engine.h. It follows engine/ctl's rules where
 * the library depends on them: memfds sized and mapped by the engine, a
 * segment header written at attach, one descriptor per reply.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "fake_engine.h"

static void reply(struct fake_engine *fe, int conn, json_t *resp, int fd)
{
	char *s = json_dumps(resp, JSON_COMPACT);
	struct iovec iov = {.iov_base = s, .iov_len = strlen(s)};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	(void)fe;
	if (fd >= 0) {
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof ctl.buf;
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof fd);
	}
	if (sendmsg(conn, &msg, MSG_NOSIGNAL) < 0) {
		/* the test killed the connection */
	}
	if (fd >= 0)
		close(fd);
	free(s);
	json_decref(resp);
}

static int memfd_of(size_t size, uint8_t **map)
{
	int fd = memfd_create("fake-engine", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
		return -1;
	if (map) {
		*map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (*map == MAP_FAILED)
			return -1;
	}
	return fd;
}

static json_t *identity(struct fake_engine *fe)
{
	return json_pack("{s:s, s:i, s:i, s:i, s:s, s:s}", "addr", "10.98.0.2", "pid", (json_int_t)fe->identity, "uid",
			 0, "gid", 0, "name", "unit", "tenant", "rmad.sock");
}

static void serve(struct fake_engine *fe, int conn)
{
	char buf[4097];
	for (;;) {
		ssize_t n = recv(conn, buf, sizeof buf - 1, 0);
		if (n <= 0 || atomic_load(&fe->stop))
			return;
		json_t *req = json_loadb(buf, (size_t)n, 0, NULL);
		const char *op = json_string_value(json_object_get(req, "op"));
		json_t *resp = json_pack("{s:i, s:O, s:s}", "v", 1, "id", json_object_get(req, "id"), "op", op ? op : "");
		int fd = -1;
		fe->requests++;
		if (!op) {
			json_object_set_new(resp, "code", json_string("bad_request"));
			json_object_set_new(resp, "error", json_string("no op"));
		} else if (fe->refuse_op && strcmp(op, fe->refuse_op) == 0) {
			json_object_set_new(resp, "code", json_string(fe->refuse_code));
			json_object_set_new(resp, "error", json_string("refused by the fake engine: asked for 9 more"));
			if (fe->refuse_quota)
				json_object_set_new(resp, "quota", json_string(fe->refuse_quota));
		} else if (strcmp(op, "open") == 0) {
			json_int_t cc = json_integer_value(json_object_get(req, "cmd_cap"));
			json_int_t pc = json_integer_value(json_object_get(req, "cpl_cap"));
			onr_new_layout(0, cc ? (uint32_t)cc : 64, pc ? (uint32_t)pc : 64, &fe->layout);
			fe->seg_map = (fe->layout.size + 4095) & ~(size_t)4095;
			fd = memfd_of(fe->seg_map, &fe->seg);
			json_t *o = identity(fe);
			json_t *more = json_pack("{s:I, s:I, s:i, s:i, s:s, s:i, s:b}", "size",
							(json_int_t)fe->layout.size, "map_size", (json_int_t)fe->seg_map,
							"cmd_cap", (json_int_t)fe->layout.cmd_cap, "cpl_cap",
							(json_int_t)fe->layout.cpl_cap, "class", "low", "max_slots", 64,
							"hugetlb", 0);
			json_object_update(o, more);
			json_decref(more);
			json_object_set_new(resp, "open", o);
		} else if (strcmp(op, "attach") == 0) {
			fe->layout.portal = 3;
			onr_encode_layout(&fe->layout, fe->seg);
			if (fe->bad_magic)
				fe->seg[0] ^= 1;
			json_object_set_new(resp, "attach", json_pack("{s:i, s:i}", "portal", 3, "core", 0));
		} else if (strcmp(op, "summary") == 0 && fe->no_summary) {
			json_object_set_new(resp, "code", json_string("bad_request"));
			json_object_set_new(resp, "error", json_string("key \"op\": unknown op \"summary\""));
		} else if (strcmp(op, "summary") == 0) {
			uint8_t *map;
			if (fe->sum_fd < 0) {
				fe->sum_fd = memfd_of(4096, &map);
				fe->sum = (_Atomic uint64_t *)(void *)map;
			}
			fd = dup(fe->sum_fd);
			json_object_set_new(resp, "summary", json_pack("{s:i, s:i}", "size", 8, "map_size", 4096));
		} else if (strcmp(op, "doorbell") == 0) {
			fe->bell_fd = eventfd(0, EFD_CLOEXEC);
			fd = dup(fe->bell_fd);
		} else if (strcmp(op, "moderate") == 0) {
			fe->mod_count = (uint32_t)json_integer_value(json_object_get(req, "count"));
			fe->mod_period_us = (uint32_t)json_integer_value(json_object_get(req, "period_us"));
		} else if (strcmp(op, "alloc_slots") == 0) {
			json_int_t k = json_integer_value(json_object_get(req, "n"));
			json_t *a = json_array();
			for (json_int_t i = 0; i < k; i++)
				json_array_append_new(a, json_integer(fe->slot_base + fe->next_slot++));
			json_object_set_new(resp, "slots", a);
		} else if (strcmp(op, "create_region") == 0) {
			json_int_t size = json_integer_value(json_object_get(req, "size"));
			size_t map = ((size_t)size + 4095) & ~(size_t)4095;
			fd = memfd_of(map, NULL);
			fe->pending_size = (uint64_t)size;
			fe->pending_map = map;
			json_object_set_new(resp, "memory", json_pack("{s:i, s:I, s:I, s:b}", "memory", 1, "size", size,
								      "map_size", (json_int_t)map, "hugetlb", 0));
		} else if (strcmp(op, "register_region") == 0 || strcmp(op, "rekey") == 0) {
			const char *k = json_string_value(json_object_get(req, "key"));
			for (int i = 0; k && i < 16; i++)
				sscanf(k + 2 * i, "%2hhx", &fe->last_key[i]);
			if (op[0] == 'r' && op[2] == 'g') {
				json_t *lay = json_object_get(req, "layout");
				fe->last_layout_len = lay ? -2 : -1;
				if (json_is_array(lay) && json_array_size(lay) <= 16) {
					size_t i;
					json_t *v;
					fe->last_layout_len = (int)json_array_size(lay);
					json_array_foreach(lay, i, v)
					{
						if (!json_is_integer(v))
							fe->last_layout_len = -2;
						fe->last_layout[i] = (uint64_t)json_integer_value(v);
					}
				}
				fe->last_perm = (uint32_t)json_integer_value(json_object_get(req, "perm"));
				fe->regions++;
				json_object_set_new(resp, "region",
						    json_pack("{s:i, s:I, s:I, s:i, s:b}", "region",
							      (json_int_t)(0x10000 | fe->regions), "size", (json_int_t)fe->pending_size,
							      "map_size", (json_int_t)fe->pending_map, "perm",
							      json_integer_value(json_object_get(req, "perm")), "hugetlb", 0));
			}
		} else if (strcmp(op, "identity") == 0) {
			json_object_set_new(resp, "identity", identity(fe));
		}
		json_decref(req);
		reply(fe, conn, resp, fd);
	}
}

static void *accept_loop(void *arg)
{
	struct fake_engine *fe = arg;
	while (!atomic_load(&fe->stop)) {
		struct pollfd pfd = {.fd = fe->lfd, .events = POLLIN};
		if (poll(&pfd, 1, 20) <= 0)
			continue;
		int c = accept4(fe->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		fe->conn = c;
		serve(fe, c);
	}
	return NULL;
}

int fake_start(struct fake_engine *fe, const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	fe->conn = fe->bell_fd = fe->sum_fd = -1;
	atomic_store(&fe->stop, 0);
	if (fe->identity == 0)
		fe->identity = 4242;
	snprintf(fe->path, sizeof fe->path, "%s", path);
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	unlink(path);
	fe->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fe->lfd < 0 || bind(fe->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fe->lfd, 4) != 0)
		return -errno;
	return -pthread_create(&fe->thr, NULL, accept_loop, fe);
}

void fake_kill(struct fake_engine *fe)
{
	if (fe->conn >= 0)
		shutdown(fe->conn, SHUT_RDWR);
}

void fake_stop(struct fake_engine *fe)
{
	atomic_store(&fe->stop, 1);
	fake_kill(fe);
	pthread_join(fe->thr, NULL);
	close(fe->lfd);
	unlink(fe->path);
	if (fe->conn >= 0)
		close(fe->conn);
	if (fe->bell_fd >= 0)
		close(fe->bell_fd);
	if (fe->sum_fd >= 0) {
		munmap((void *)fe->sum, 4096);
		close(fe->sum_fd);
	}
	fe->sum = NULL;
	if (fe->seg)
		munmap(fe->seg, fe->seg_map);
	fe->seg = NULL;
}

_Atomic uint32_t *fake_cmd_cons(struct fake_engine *fe)
{
	return (_Atomic uint32_t *)(void *)(fe->seg + fe->layout.cmd_off + ONR_RING_CONS_OFF);
}

_Atomic uint32_t *fake_cpl_prod(struct fake_engine *fe)
{
	return (_Atomic uint32_t *)(void *)(fe->seg + fe->layout.cpl_off + ONR_RING_PROD_OFF);
}

int fake_take(struct fake_engine *fe, struct onr_command *out, int max)
{
	uint8_t *ring = fe->seg + fe->layout.cmd_off;
	uint32_t prod = atomic_load((_Atomic uint32_t *)(void *)(ring + ONR_RING_PROD_OFF));
	int n = 0;
	while (n < max && fe->cmd_next != prod) {
		const uint8_t *b = ring + ONR_RING_HEADER_SIZE + (fe->cmd_next & (fe->layout.cmd_cap - 1)) * 64;
		struct onr_command *c = &out[n++];
		c->op = b[0];
		c->flags = b[1];
		c->slot = onr_get32(b + 4);
		c->cookie = onr_get64(b + 8);
		c->remote_addr = onr_get32(b + 16);
		c->remote_region = onr_get32(b + 20);
		c->local_region = onr_get32(b + 32);
		c->local_offset = onr_get64(b + 40);
		if (c->op == ONERMA_OP_LOOKUP) {
			c->length = onr_get16(b + 2);
			c->tag = onr_get64(b + 24);
			c->remote_offset = onr_get32(b + 36);
		} else {
			c->length = onr_get32(b + 36);
			c->tag = 0;
			c->remote_offset = onr_get64(b + 24);
		}
		memcpy(c->key, b + 48, 16);
		fe->cmd_next++;
	}
	atomic_store(fake_cmd_cons(fe), fe->cmd_next);
	return n;
}

void fake_complete(struct fake_engine *fe, const struct onerma_completion *c)
{
	uint8_t *ring = fe->seg + fe->layout.cpl_off;
	uint8_t *b = ring + ONR_RING_HEADER_SIZE + (fe->cpl_next & (fe->layout.cpl_cap - 1)) * 32;
	_Atomic uint32_t *arm = (_Atomic uint32_t *)(void *)(fe->seg + ONR_SEGMENT_ARM_OFF);
	uint32_t one = 1;
	memset(b, 0, 32);
	onr_put64(b, c->cookie);
	onr_put32(b + 8, c->slot);
	b[12] = c->status;
	b[13] = c->op;
	onr_put32(b + 16, c->issue_delay_ns);
	onr_put32(b + 20, c->total_delay_ns);
	onr_put32(b + 24, c->length);
	fe->cpl_next++;
	atomic_store(fake_cpl_prod(fe), fe->cpl_next);
	if (fe->bell_fd >= 0 && atomic_load(arm) != 0 && atomic_compare_exchange_strong(arm, &one, 0)) {
		uint64_t v = 1;
		ssize_t w = write(fe->bell_fd, &v, sizeof v);
		(void)w;
	}
}
