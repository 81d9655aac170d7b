/*
 * reader.c - a reader in C: READs and WRITEs of a remote region with the
 * K_d its owner handed over, each op checked by its completion, WRITEs
 * read back; LOOKUPs of a region with a bucket layout.
 *
 *	onerma-c-reader [-socket PATH] -remote ADDR -region ID
 *
 * It prints "identity ADDR IDENTITY" (what the owner derives K_d for),
 * then reads commands on stdin, one a line:
 *
 *	key READ_KD WRITE_KD  set the keys (hex)
 *	read OFFSET LENGTH    -> read STATUS ISSUE_NS TOTAL_NS HEX
 *	write OFFSET HEX      -> write STATUS, then readback STATUS match|mismatch
 *	burst N LENGTH        N READs posted, one flush -> burst OK_COUNT
 *	lookup REGION OFFSET TAG LENGTH FLAGS KD
 *	                      a LOOKUP of TAG (hex) in the bucket at OFFSET of REGION with its
 *	                      K_d for LOOKUP (hex), into the sink's first LENGTH bytes, which
 *	                      are set to ee first -> lookup STATUS ANSWER_LENGTH HEX (the
 *	                      sink's first ANSWER_LENGTH bytes)
 *	hang ADDR N           N READs to an engine that never answers, then every
 *	                      completion: cpl COOKIE SLOT STATUS ..., and gone NS
 *	                      (CLOCK_MONOTONIC) when the engine is known gone
 *	redial                a new portal once the engine is back -> identity ADDR IDENTITY
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <onerma.h>

#define SLOTS 16
#define SINK_BYTES (SLOTS * ONERMA_MAX_OP_BYTES)

static struct onerma_portal *p;
static struct onerma_region *sink;
static uint32_t remote, region;
static uint8_t kd_read[ONERMA_KEY_SIZE], kd_write[ONERMA_KEY_SIZE];

static int die(const char *what, int err)
{
	fprintf(stderr, "onerma-c-reader: %s: %s (%s)\n", what, onerma_strerror(err), onerma_errmsg());
	exit(1);
}

static int unhex(const char *s, uint8_t *out, size_t max)
{
	size_t n = 0;
	while (s[0] && s[1] && n < max && sscanf(s, "%2hhx", &out[n]) == 1) {
		s += 2;
		n++;
	}
	return (int)n;
}

/* open dials, takes slots and registers the sink: also after a redial. */
static void open_portal(const char *sock, struct onerma_portal *old)
{
	struct onerma_identity id;
	char a[16];
	int err = old ? onerma_redial(old, 30000, &p) : onerma_dial(sock, "c-reader", NULL, &p);
	if (err)
		die("dial", err);
	if ((err = onerma_alloc_slots(p, SLOTS, NULL)) != 0)
		die("alloc_slots", err);
	if ((err = onerma_register_region(p, SINK_BYTES, ONERMA_PERM_LOCAL_READ | ONERMA_PERM_LOCAL_WRITE, &sink)))
		die("register_region", err);
	onerma_portal_identity(p, &id);
	printf("identity %s %u\n", onerma_addr_format(id.addr, a), id.pid);
}

/* one posts a single op and waits for its completion. */
static struct onerma_completion one(uint32_t type, uint64_t roff, uint64_t loff, uint32_t len)
{
	struct onerma_op op;
	struct onerma_completion c;
	uint32_t slot;
	int err;
	memset(&op, 0, sizeof op);
	if ((err = onerma_slot_take(p, &slot)) != 0)
		die("slot", err);
	op.type = type;
	op.slot = slot;
	op.cookie = 1;
	op.remote_addr = remote;
	op.remote_region = region;
	op.remote_offset = roff;
	memcpy(op.key, type == ONERMA_OP_WRITE ? kd_write : kd_read, ONERMA_KEY_SIZE);
	op.local = sink;
	op.local_offset = loff;
	op.length = len;
	if ((err = onerma_submit(p, &op)) != 0)
		die("post", err);
	if ((err = onerma_wait(p, &c, 1, 10000)) < 0)
		die("wait", err);
	onerma_slot_release(p, c.slot);
	return c;
}

int main(int argc, char **argv)
{
	const char *sock = ONERMA_DEFAULT_SOCKET;
	static char line[2 * ONERMA_MAX_OP_BYTES + 128], arg[2 * ONERMA_MAX_OP_BYTES + 1];

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "-socket") == 0)
			sock = argv[i + 1];
		else if (strcmp(argv[i], "-remote") == 0 && onerma_addr_parse(argv[i + 1], &remote) == 0)
			continue;
		else if (strcmp(argv[i], "-region") == 0)
			region = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		else {
			fprintf(stderr, "usage: onerma-c-reader [-socket PATH] -remote ADDR -region ID\n");
			return 2;
		}
	}
	open_portal(sock, NULL);
	fflush(stdout);

	while (fgets(line, sizeof line, stdin)) {
		unsigned long long off, len, n, tag, flags;
		char a[64], h1[64], h2[64];
		uint8_t *mem = onerma_region_addr(sink);
		if (sscanf(line, "key %63s %63s", h1, h2) == 2) {
			unhex(h1, kd_read, ONERMA_KEY_SIZE);
			unhex(h2, kd_write, ONERMA_KEY_SIZE);
			printf("key ok\n");
		} else if (sscanf(line, "read %llu %llu", &off, &len) == 2 && len >= 1 && len <= ONERMA_MAX_OP_BYTES) {
			struct onerma_completion c = one(ONERMA_OP_READ, off, 0, (uint32_t)len);
			printf("read %s %u %u ", onerma_status_str(c.status), c.issue_delay_ns, c.total_delay_ns);
			for (unsigned i = 0; c.status == ONERMA_STATUS_OK && i < len; i++)
				printf("%02x", mem[i]);
			printf("\n");
		} else if (sscanf(line, "write %llu %8192s", &off, arg) == 2) {
			/* The source at the sink's second half, the read-back into its first. */
			uint8_t *src = mem + SINK_BYTES / 2;
			int k = unhex(arg, src, ONERMA_MAX_OP_BYTES);
			struct onerma_completion c = one(ONERMA_OP_WRITE, off, SINK_BYTES / 2, (uint32_t)k);
			printf("write %s\n", onerma_status_str(c.status));
			c = one(ONERMA_OP_READ, off, 0, (uint32_t)k);
			printf("readback %s %s\n", onerma_status_str(c.status),
			       c.status == ONERMA_STATUS_OK && memcmp(mem, src, (size_t)k) == 0 ? "match" : "mismatch");
		} else if (sscanf(line, "lookup %llu %llu %llx %llu %llu %63s", &n, &off, &tag, &len, &flags, h1) == 6 &&
			   len >= 1 && len <= ONERMA_MAX_OP_BYTES) {
			struct onerma_op op;
			struct onerma_completion c;
			int err;
			memset(&op, 0, sizeof op);
			memset(mem, 0xee, (size_t)len);
			if ((err = onerma_slot_take(p, &op.slot)) != 0)
				die("slot", err);
			op.type = ONERMA_OP_LOOKUP;
			op.cookie = 2;
			op.remote_addr = remote;
			op.remote_region = (uint32_t)n;
			op.remote_offset = off;
			op.tag = tag;
			op.flags = (uint32_t)flags;
			unhex(h1, op.key, ONERMA_KEY_SIZE);
			op.local = sink;
			op.length = (uint32_t)len;
			if ((err = onerma_submit(p, &op)) != 0) {
				printf("lookup post %s\n", onerma_strerror(err));
				onerma_slot_release(p, op.slot);
				fflush(stdout);
				continue;
			}
			if ((err = onerma_wait(p, &c, 1, 10000)) < 0)
				die("wait", err);
			onerma_slot_release(p, c.slot);
			printf("lookup %s %u ", onerma_status_str(c.status), c.length);
			for (unsigned i = 0; i < c.length && i < len; i++)
				printf("%02x", mem[i]);
			printf("\n");
		} else if (sscanf(line, "burst %llu %llu", &n, &len) == 2 && n >= 1 && n <= SLOTS && len >= 1 &&
			   len <= ONERMA_MAX_OP_BYTES) {
			/* Every op staged, then one store publishes them all. */
			struct onerma_completion c[SLOTS];
			int ok = 0, got = 0;
			for (unsigned i = 0; i < n; i++) {
				struct onerma_op op;
				memset(&op, 0, sizeof op);
				onerma_slot_take(p, &op.slot);
				op.type = ONERMA_OP_READ;
				op.cookie = i;
				op.remote_addr = remote;
				op.remote_region = region;
				op.remote_offset = i * len;
				memcpy(op.key, kd_read, ONERMA_KEY_SIZE);
				op.local = sink;
				op.local_offset = i * ONERMA_MAX_OP_BYTES;
				op.length = (uint32_t)len;
				if (onerma_post(p, &op) != 0)
					die("post", -EINVAL);
			}
			onerma_flush(p);
			while (got < (int)n) {
				int k = onerma_wait(p, c, SLOTS, 10000);
				if (k < 0)
					die("wait", k);
				for (int i = 0; i < k; i++) {
					ok += c[i].status == ONERMA_STATUS_OK;
					onerma_slot_release(p, c[i].slot);
				}
				got += k;
			}
			printf("burst %d\n", ok);
		} else if (sscanf(line, "hang %63s %llu", a, &n) == 2 && n >= 1 && n <= SLOTS) {
			uint32_t nobody;
			struct onerma_completion c[SLOTS];
			int k;
			onerma_addr_parse(a, &nobody);
			for (unsigned i = 0; i < n; i++) {
				struct onerma_op op;
				memset(&op, 0, sizeof op);
				onerma_slot_take(p, &op.slot);
				op.type = ONERMA_OP_READ;
				op.cookie = i;
				op.remote_addr = nobody;
				op.remote_region = region;
				memcpy(op.key, kd_read, ONERMA_KEY_SIZE);
				op.local = sink;
				op.local_offset = i * ONERMA_MAX_OP_BYTES;
				op.length = ONERMA_MAX_OP_BYTES;
				onerma_post(p, &op);
			}
			onerma_flush(p);
			printf("posted %llu\n", n);
			fflush(stdout);
			while ((k = onerma_wait(p, c, SLOTS, 60000)) > 0)
				for (int i = 0; i < k; i++)
					printf("cpl %llu %u %s\n", (unsigned long long)c[i].cookie, c[i].slot,
					       onerma_status_str(c[i].status));
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			printf("%s %lld\n", k == -ONERMA_E_ENGINE_GONE ? "gone" : onerma_strerror(k),
			       (long long)ts.tv_sec * 1000000000 + ts.tv_nsec);
		} else if (strncmp(line, "redial", 6) == 0) {
			struct onerma_portal *old = p;
			open_portal(sock, old);
			onerma_close(old);
		} else {
			printf("error unknown command\n");
		}
		fflush(stdout);
	}
	onerma_close(p);
	return 0;
}
