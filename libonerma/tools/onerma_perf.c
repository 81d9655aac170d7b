/*
 * onerma_perf.c - onerma-perf: rmaperf's raw tests (tools/rmaperf) through
 * libonerma, so that a C application's speed is measured as a Go one's is,
 * with the same flags and the same -json row (internal/benchrow.Row).
 *
 *	onerma-perf read_bw   [-socket PATH] (-server HOST:PORT -region ID -creds DIR | -self) [-s SIZE] [-O N] [-D DURATION] [-json]
 *	onerma-perf read_lat  [-socket PATH] (-server HOST:PORT -region ID -creds DIR | -self) [-s SIZE] [-D DURATION] [-json]
 *	onerma-perf write_bw  [-socket PATH] (-server HOST:PORT -region ID -creds DIR | -self) [-s SIZE] [-O N] [-D DURATION] [-json]
 *	onerma-perf write_lat [-socket PATH] (-server HOST:PORT -region ID -creds DIR | -self) [-s SIZE] [-D DURATION] [-json]
 *
 * It opens a portal on its engine and finds its target one of two ways.
 * With -self (the single-engine loopback of rmaperf -self) it registers a
 * region on its own engine and derives its own K_d for the test's op type
 * with onerma_derive_kd, as an owner does for a reader. With -server it is
 * rmaperf's client of an `rmaperf server`: it checks the credentials of
 * -creds DIR (DIR/client.pem, as `rmactl creds` wrote it) before asking
 * its engine for anything, then fetches the K_d of its portal's identity
 * for the test's op on region -region over the key exchange (libonerma's
 * keyx client: TLS 1.3, the server's certificate verified against the
 * credentials' CA and the host of -server), retrying a refused connection
 * for 10 s as rmaperf does, and sends its ops to the engine the grant
 * names. A refusal is reported with its reason and the owner's words, and
 * the tool exits 1. It then keeps -O ops of -s bytes in flight (the _lat
 * tests: one) for -warmup and then -D. READs land in a local sink, WRITEs come from a local source;
 * remote offsets walk the region as rmaperf's do. It reports ops/s, MB/s,
 * latency percentiles from post to completion (the histogram of
 * engine/telemetry.Hist, preallocated), the engine's total_delay
 * percentiles, errors (every non-OK completion; the first status in the
 * note), and cpu_ns_per_op: this process's CPU time (getrusage
 * RUSAGE_SELF, user + system, every thread) over the measured interval
 * divided by the ops it completed, which rmaperf reports the same way.
 *
 * The measuring loop allocates nothing and makes no system call per op:
 * onerma_post, onerma_flush and onerma_poll are plain loads and stores in
 * shared memory, and the clock is read through the vDSO. -event waits in
 * onerma_wait instead (spinning -spins polls, then sleeping on the
 * engine's completion doorbell: one poll(2) per sleep, not per op);
 * -yield calls sched_yield after each empty poll; -spin=false sleeps 1 us
 * every 4096 empty polls.
 *
 * -verify checks every byte read against the pattern rmaperf's server and
 * -self fill their regions with; a write test verifies only with -self (the
 * written region must be this process's), as rmaperf's does.
 *
 * rmaperf's credentials from a launcher (-creds-fd, keyx.Attach) and its
 * executor (-exec, sizes above 4096) are Go's; onerma-perf refuses those
 * flags by name.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <onerma.h>

#define PROG "onerma-perf"
#define NCPL 64 /* completions taken per poll */

/* ---- Flags, as Go's flag package parses them ---- */

enum kind { F_BOOL, F_INT, F_U64, F_DUR, F_STR };

struct flag {
	const char *name;
	enum kind kind;
	void *ptr;
	const char *def; /* as the usage text shows it ("": none) */
	const char *usage;
	bool given;
};

struct opts {
	const char *socket, *name, *setup, *class_flag, *server, *creds, *region;
	int size, outstanding, spins;
	bool self, json, verify, spin, yield, event;
	int64_t dur_ns, warm_ns;
	uint64_t region_bytes;
};

static struct opts o = {
	.socket = ONERMA_DEFAULT_SOCKET,
	.name = "onerma-perf",
	.setup = "",
	.class_flag = "low",
	.server = "",
	.creds = "",
	.region = "",
	.size = 64,
	.outstanding = 32,
	.spin = true,
	.dur_ns = 5000000000LL,
	.warm_ns = 500000000LL,
};

static struct flag flags[] = {
	{"D", F_DUR, &o.dur_ns, "5s", "measurement duration", false},
	{"O", F_INT, &o.outstanding, "32", "ops kept in flight (read_lat, write_lat: 1)", false},
	{"class", F_STR, &o.class_flag, "\"low\"", "class of service to ask the engine for: low or high", false},
	{"creds", F_STR, &o.creds, "",
	 "with -server: directory of the client's TLS credentials (DIR/client.pem, from rmactl creds)", false},
	{"event", F_BOOL, &o.event, "",
	 "wait with onerma_wait: spin -spins polls, then sleep on the engine's completion doorbell", false},
	{"json", F_BOOL, &o.json, "", "print one JSON line (rmaperf's row, system \"onerma-c\")", false},
	{"name", F_STR, &o.name, "\"onerma-perf\"",
	 "application name presented to the engine (its slot and class policy match on it)", false},
	{"region", F_STR, &o.region, "", "with -server: the region id the server printed", false},
	{"region-bytes", F_U64, &o.region_bytes, "", "with -self: bytes of the region the ops read or write (0: 1 MB)",
	 false},
	{"s", F_INT, &o.size, "64", "op size in bytes (1..4096)", false},
	{"self", F_BOOL, &o.self, "", "target a region of this client's own engine (loopback)", false},
	{"server", F_STR, &o.server, "", "rmaperf server's key service HOST:PORT", false},
	{"setup", F_STR, &o.setup, "", "setup label for -json (loopback, memif, ...)", false},
	{"socket", F_STR, &o.socket, "\"" ONERMA_DEFAULT_SOCKET "\"", "engine control socket", false},
	{"spin", F_BOOL, &o.spin, "true", "busy-poll for completions (false: sleep 1 us every 4096 empty polls)", false},
	{"spins", F_INT, &o.spins, "", "with -event: polls before sleeping (0: libonerma's default, -1: none)", false},
	{"verify", F_BOOL, &o.verify, "", "check every byte read (write tests: every byte written, with -self only)",
	 false},
	{"warmup", F_DUR, &o.warm_ns, "500ms", "warm-up before measuring", false},
	{"yield", F_BOOL, &o.yield, "", "sched_yield after every empty poll (share a CPU with an engine)", false},
};
#define NFLAGS (sizeof flags / sizeof flags[0])

/* foreign returns why one of rmaperf's flags does not apply here, or NULL
 * for a name rmaperf does not have either. */
static const char *foreign(const char *name)
{
	static const char *const exec[] = {"exec", "bg", "rate", "chunk", "exec-slots", "timeout-retries"};
	if (strcmp(name, "creds-fd") == 0)
		return "credentials from a launcher's descriptor (keyx.Attach) are Go's: use -creds DIR";
	for (size_t i = 0; i < sizeof exec / sizeof exec[0]; i++)
		if (strcmp(name, exec[i]) == 0)
			return "portal.Executor is Go's: onerma-perf moves ops of 1..4096 bytes";
	if (strncmp(name, "cc-", 3) == 0 || strncmp(name, "short-", 6) == 0)
		return "portal.Executor is Go's: onerma-perf moves ops of 1..4096 bytes";
	if (strcmp(name, "local-bytes") == 0)
		return "not here: each op in flight has its own 4 KB of local memory";
	return NULL;
}

static const char *synopsis[] = {
	PROG " read_bw   [-socket PATH] (-server HOST:PORT -region ID -creds DIR | -self) [-s SIZE] [-O N] [-D DURATION] [-json]",
	PROG " read_lat  [-socket PATH] (-server HOST:PORT -region ID -creds DIR | -self) [-s SIZE] [-D DURATION] [-json]",
	PROG " write_bw  [-socket PATH] (-server HOST:PORT -region ID -creds DIR | -self) [-s SIZE] [-O N] [-D DURATION] [-json]",
	PROG " write_lat [-socket PATH] (-server HOST:PORT -region ID -creds DIR | -self) [-s SIZE] [-D DURATION] [-json]",
};

static void usage(FILE *w)
{
	for (size_t i = 0; i < sizeof synopsis / sizeof synopsis[0]; i++)
		fprintf(w, "%s %s\n", i == 0 ? "usage:" : "      ", synopsis[i]);
	fprintf(w, "\nrmaperf's raw tests through libonerma, the C client: the same flags where they\n"
		   "apply and the same -json row (system \"onerma-c\"), with cpu_ns_per_op, this\n"
		   "process's CPU time per op. -self registers a region on the engine and derives\n"
		   "its own K_d (onerma_derive_kd); -server fetches the K_d from an rmaperf server\n"
		   "over the key exchange (TLS 1.3, libonerma's keyx client).\n");
	fprintf(w, "\nexamples:\n");
	fprintf(w, "  " PROG " read_bw -socket /run/onerma/rmad.sock -self -s 64 -O 32 -D 5s\n");
	fprintf(w, "  " PROG " read_bw -server hosta.example:18515 -region 0x10001 -creds ~/onerma-creds -s 4096 -O 16 "
		   "-D 10s -verify\n");
	fprintf(w, "  " PROG " read_lat -self -s 4096 -D 5s -json\n");
	fprintf(w, "\nflags:\n");
	for (size_t i = 0; i < NFLAGS; i++) {
		static const char *type[] = {"", " int", " uint", " duration", " string"};
		const struct flag *f = &flags[i];
		fprintf(w, "  -%s%s\n    \t%s", f->name, type[f->kind], f->usage);
		if (f->def[0] && strcmp(f->def, "\"\"") != 0 && !(f->kind == F_BOOL && strcmp(f->def, "false") == 0))
			fprintf(w, " (default %s)", f->def);
		fprintf(w, "\n");
	}
	fprintf(w, "\naliases (old spellings, still accepted):\n  -ctl: alias of -socket\n");
}

/* parse_duration parses Go's time.ParseDuration syntax ("5s", "1.5s",
 * "500ms", "1m30s", "10us", "10µs"): 0, or -1. */
static int parse_duration(const char *s, int64_t *out)
{
	static const struct {
		const char *unit;
		double ns;
	} units[] = {{"ns", 1}, {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
	double total = 0;
	if (strcmp(s, "0") == 0) {
		*out = 0;
		return 0;
	}
	if (!*s)
		return -1;
	while (*s) {
		char *end;
		double v = strtod(s, &end);
		size_t best = 0;
		int u = -1;
		if (end == s || v < 0)
			return -1;
		/* The longest unit that matches ("ms" before "m"). */
		for (int i = 0; i < (int)(sizeof units / sizeof units[0]); i++) {
			size_t n = strlen(units[i].unit);
			if (strncmp(end, units[i].unit, n) == 0 && n > best) {
				best = n;
				u = i;
			}
		}
		if (u < 0)
			return -1;
		total += v * units[u].ns;
		s = end + best;
	}
	if (total > 9.2e18)
		return -1;
	*out = (int64_t)total;
	return 0;
}

static int set_flag(struct flag *f, const char *v)
{
	char *end;
	errno = 0;
	switch (f->kind) {
	case F_BOOL:
		if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "t") == 0 || strcmp(v, "T") == 0 ||
		    strcmp(v, "TRUE") == 0 || strcmp(v, "True") == 0)
			*(bool *)f->ptr = true;
		else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0 || strcmp(v, "f") == 0 ||
			 strcmp(v, "F") == 0 || strcmp(v, "FALSE") == 0 || strcmp(v, "False") == 0)
			*(bool *)f->ptr = false;
		else
			return -1;
		return 0;
	case F_INT: {
		long long x = strtoll(v, &end, 0);
		if (errno || end == v || *end || x < -2147483647LL || x > 2147483647LL)
			return -1;
		*(int *)f->ptr = (int)x;
		return 0;
	}
	case F_U64: {
		unsigned long long x;
		if (*v == '-')
			return -1;
		x = strtoull(v, &end, 0);
		if (errno || end == v || *end)
			return -1;
		*(uint64_t *)f->ptr = x;
		return 0;
	}
	case F_DUR:
		return parse_duration(v, (int64_t *)f->ptr);
	case F_STR:
		*(const char **)f->ptr = v;
		return 0;
	}
	return -1;
}

/* parse_flags parses args as Go's flag package does (-name, --name,
 * -name=value, -name value; a bool takes no separate value; "--" ends the
 * flags): 0, 1 for -h, or 2 after printing the error and the usage. */
static int parse_flags(const char *test, int argc, char **argv)
{
	int i = 0;
	while (i < argc) {
		const char *a = argv[i], *val = NULL;
		char name[64];
		size_t n;
		struct flag *f = NULL;
		if (a[0] != '-' || a[1] == 0)
			break;
		i++;
		if (strcmp(a, "--") == 0)
			break;
		a += a[1] == '-' ? 2 : 1;
		n = strcspn(a, "=");
		if (n == 0 || n >= sizeof name || a[0] == '-') {
			fprintf(stderr, "bad flag syntax: %s\n", argv[i - 1]);
			usage(stderr);
			return 2;
		}
		memcpy(name, a, n);
		name[n] = 0;
		if (a[n] == '=')
			val = a + n + 1;
		if (strcmp(name, "h") == 0 || strcmp(name, "help") == 0) {
			usage(stderr);
			return 1;
		}
		if (strcmp(name, "ctl") == 0)
			strcpy(name, "socket");
		for (size_t k = 0; k < NFLAGS; k++)
			if (strcmp(flags[k].name, name) == 0)
				f = &flags[k];
		if (!f) {
			const char *why = foreign(name);
			if (why) {
				fprintf(stderr, PROG " %s: -%s: %s\n", test, name, why);
				return 2;
			}
			fprintf(stderr, "flag provided but not defined: -%s\n", name);
			usage(stderr);
			return 2;
		}
		if (!val && f->kind != F_BOOL) {
			if (i == argc) {
				fprintf(stderr, "flag needs an argument: -%s\n", name);
				usage(stderr);
				return 2;
			}
			val = argv[i++];
		}
		if (set_flag(f, val ? val : "true") != 0) {
			fprintf(stderr, "invalid value \"%s\" for flag -%s: parse error\n", val, name);
			usage(stderr);
			return 2;
		}
		f->given = true;
	}
	if (i < argc) {
		fprintf(stderr, PROG ": %s: unexpected arguments:", test);
		for (; i < argc; i++)
			fprintf(stderr, " \"%s\"", argv[i]);
		fprintf(stderr, "\n");
		return 2;
	}
	return 0;
}

/* ---- The latency histogram: engine/telemetry.Hist, in C ---- */

#define SUB_BITS 6

struct hist {
	uint64_t counts[64 * 64];
	uint64_t n, max;
};

static int bucket_of(uint64_t v)
{
	int e;
	if (v < (1u << SUB_BITS))
		return (int)v;
	e = 64 - __builtin_clzll(v) - SUB_BITS; /* >= 1 */
	return e << SUB_BITS | (int)((v >> (e - 1)) & ((1u << SUB_BITS) - 1));
}

static uint64_t low_of(int b)
{
	int e = b >> SUB_BITS;
	uint64_t m = (uint64_t)(b & ((1 << SUB_BITS) - 1));
	if (e == 0)
		return m;
	return ((1u << SUB_BITS) | m) << (e - 1);
}

static inline void hist_add(struct hist *h, uint64_t v)
{
	int b = bucket_of(v);
	if (b >= 64 * 64)
		b = 64 * 64 - 1;
	h->counts[b]++;
	h->n++;
	if (v > h->max)
		h->max = v;
}

/* hist_quantile: the value below which a fraction q of samples lie (bucket
 * midpoint, at most max; 0 without samples). */
static uint64_t hist_quantile(const struct hist *h, double q)
{
	uint64_t rank, seen = 0;
	double r;
	if (h->n == 0)
		return 0;
	r = q * (double)h->n;
	rank = (uint64_t)r;
	if ((double)rank < r)
		rank++;
	if (rank == 0)
		rank = 1;
	for (int b = 0; b < 64 * 64; b++) {
		seen += h->counts[b];
		if (seen >= rank) {
			uint64_t mid = (low_of(b) + low_of(b + 1)) / 2;
			return mid < h->max ? mid : h->max;
		}
	}
	return h->max;
}

/* Two histograms of 32 KB each: static, never allocated in the loop. */
static struct hist lat, eng;

/* ---- The measurement ---- */

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* cpu_ns is this process's user and system CPU time, every thread. */
static int64_t cpu_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
	       ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* The pattern of the region's bytes (internal/pattern.At). */
static inline uint8_t pattern_at(uint64_t off) { return (uint8_t)(off * 31 + 7); }

struct result {
	uint64_t ops, errs;
	int first_err;
	double secs;
	double cpu_ns_per_op;
};

/* fail reports a failed call: with the detail of the thread's last failed
 * control call when control is set (onerma_errmsg), else the code's name. */
static int fail(const char *test, const char *what, int err, bool control)
{
	const char *detail = control ? onerma_errmsg() : "";
	fprintf(stderr, PROG " %s: %s: %s%s%s%s\n", test, what, onerma_strerror(err), detail[0] ? " (" : "", detail,
		detail[0] ? ")" : "");
	return 1;
}

/* What the ops read or write: the engine and region, their size, the K_d,
 * and (with -self) the memory, to verify writes. */
struct target {
	uint32_t addr, region;
	uint64_t size;
	uint8_t kd[ONERMA_KEY_SIZE];
	const uint8_t *mem;
};

/* self_target registers a region of this engine filled with the pattern
 * and derives the K_d an owner derives for this process's identity and the
 * test's op type (onerma_derive_kd, from the region's K_r). */
static int self_target(const char *test, struct onerma_portal *p, bool write, struct target *t)
{
	uint64_t region_bytes = o.region_bytes ? o.region_bytes : 1 << 20;
	struct onerma_region *r;
	struct onerma_identity id;
	uint8_t kr[ONERMA_KEY_SIZE], *mem;
	int err;
	if ((err = onerma_register_region(p, region_bytes, ONERMA_PERM_ALL, &r)) != 0)
		return fail(test, "register_region (the target)", err, true);
	mem = onerma_region_addr(r);
	for (uint64_t i = 0; i < region_bytes; i++)
		mem[i] = pattern_at(i);
	onerma_portal_identity(p, &id);
	onerma_region_key(r, kr);
	err = onerma_derive_kd(kr, id.addr, id.pid, write ? ONERMA_OP_WRITE : ONERMA_OP_READ, t->kd);
	explicit_bzero(kr, sizeof kr);
	if (err != 0)
		return fail(test, "derive_kd", err, false);
	t->addr = id.addr;
	t->region = onerma_region_id(r);
	t->size = region_bytes;
	t->mem = mem;
	return 0;
}

/* server_target fetches the K_d of this portal's identity for the test's
 * op on -region from the rmaperf server at -server (onerma_keyx_*), as
 * rmaperf's client does with keyx.Fetch. */
static int server_target(const char *test, struct onerma_portal *p, uint32_t region, bool write, struct target *t)
{
	struct onerma_identity id;
	struct onerma_keyx *kx;
	struct onerma_grant g;
	char what[320];
	int err;
	snprintf(what, sizeof what, "key exchange with %s", o.server);
	onerma_portal_identity(p, &id);
	/* The server may still be starting: dial retries a refused
	 * connection for 10 s. */
	if ((err = onerma_keyx_dial(o.server, o.creds, 10000, &kx)) != 0)
		return fail(test, what, err, true);
	err = onerma_keyx_fetch_for(kx, &id, region, write ? ONERMA_OP_WRITE : ONERMA_OP_READ, 10000, &g);
	onerma_keyx_close(kx);
	if (err != 0)
		return fail(test, what, err, true);
	if (g.size < (uint64_t)o.size) {
		fprintf(stderr, PROG " %s: region %#x is %" PRIu64 " bytes, smaller than -s %d\n", test, region, g.size,
			o.size);
		onerma_grant_zero(&g);
		return 1;
	}
	t->addr = g.owner_addr;
	t->region = g.region;
	t->size = g.size;
	memcpy(t->kd, g.kd, ONERMA_KEY_SIZE);
	t->mem = NULL;
	onerma_grant_zero(&g);
	return 0;
}

static int run(const char *test, struct onerma_portal *p, bool write, const struct target *tg, struct result *res)
{
	const uint32_t O = (uint32_t)o.outstanding, size = (uint32_t)o.size;
	struct onerma_region *local;
	struct onerma_op tmpl;
	struct onerma_completion cpl[NCPL];
	uint32_t *slots = calloc(O, sizeof *slots);
	int64_t *post_at = calloc(O, sizeof *post_at);
	uint64_t *rem_off = calloc(O, sizeof *rem_off);
	uint64_t next = 0, span, ops = 0, errs = 0;
	int64_t start, end, deadline, cpu0 = 0;
	uint32_t inflight = 0, spins = 0;
	const uint8_t *tmem = tg->mem;
	uint8_t *lmem;
	bool measuring = false;
	int err, first_err = 0;

	if (!slots || !post_at || !rem_off)
		return fail(test, "allocating the per-op state", -ENOMEM, false);
	if (O > onerma_portal_cmd_cap(p) || O > onerma_portal_cpl_cap(p)) {
		fprintf(stderr, PROG " %s: -O %u: above the engine's rings (%u command, %u completion entries)\n", test,
			O, onerma_portal_cmd_cap(p), onerma_portal_cpl_cap(p));
		return 1;
	}
	if ((err = onerma_alloc_slots(p, O, slots)) != 0)
		return fail(test, "alloc_slots", err, true);

	memset(&tmpl, 0, sizeof tmpl);
	memcpy(tmpl.key, tg->kd, ONERMA_KEY_SIZE);

	/* Each op in flight has its own 4 KB of local memory: a READ's sink,
	 * a WRITE's source. */
	if ((err = onerma_register_region(p, (uint64_t)O * ONERMA_MAX_OP_BYTES,
					  ONERMA_PERM_LOCAL_READ | ONERMA_PERM_LOCAL_WRITE, &local)) != 0)
		return fail(test, "register_region (local)", err, true);
	lmem = onerma_region_addr(local);
	if (write)
		for (uint64_t i = 0; i < (uint64_t)O * ONERMA_MAX_OP_BYTES; i++)
			lmem[i] = (uint8_t)(i * 17 + 3);

	tmpl.type = write ? ONERMA_OP_WRITE : ONERMA_OP_READ;
	tmpl.remote_addr = tg->addr;
	tmpl.remote_region = tg->region;
	tmpl.local = local;
	tmpl.length = size;
	span = tg->size - size;

#define POST(k)                                                                                                        \
	do {                                                                                                           \
		struct onerma_op op_ = tmpl;                                                                           \
		rem_off[k] = next % (span + 1);                                                                        \
		next += 4096 + 64;                                                                                     \
		post_at[k] = now_ns();                                                                                 \
		if (write && o.verify) /* new bytes for every write, so one that did not land shows */                \
			for (uint32_t i_ = 0; i_ < size; i_++)                                                         \
				lmem[(size_t)(k) * ONERMA_MAX_OP_BYTES + i_] = (uint8_t)((uint8_t)(next >> 6) + i_);   \
		op_.slot = slots[k];                                                                                   \
		op_.cookie = (k);                                                                                      \
		op_.remote_offset = rem_off[k];                                                                        \
		op_.local_offset = (uint64_t)(k) * ONERMA_MAX_OP_BYTES;                                                \
		if ((err = onerma_post(p, &op_)) != 0)                                                                 \
			return fail(test, "post", err, false);                                                         \
		inflight++;                                                                                            \
	} while (0)

	for (uint32_t k = 0; k < O; k++)
		POST(k);
	onerma_flush(p);
	start = now_ns() + o.warm_ns;
	end = start + o.dur_ns;
	deadline = end + 30000000000LL;

	while (inflight > 0) {
		int n = o.event ? onerma_wait(p, cpl, NCPL, 100) : onerma_poll(p, cpl, NCPL);
		int64_t now;
		if (n == -ETIMEDOUT) {
			n = 0;
			spins = 0xfff; /* check the deadline now */
		}
		if (n < 0) {
			fprintf(stderr, PROG " %s: waiting for completions (%u in flight): %s\n", test, inflight,
				onerma_strerror(n));
			return 1;
		}
		if (n == 0) {
			/* Spin (lowest latency); check the deadline now and then. */
			if ((++spins & 0xfff) == 0) {
				if (now_ns() > deadline) {
					fprintf(stderr, PROG " %s: waiting for completions (%u in flight): timed out\n",
						test, inflight);
					return 1;
				}
				if (!o.spin) {
					struct timespec us = {0, 1000};
					nanosleep(&us, NULL);
				}
			}
			if (o.yield)
				sched_yield();
			continue;
		}
		now = now_ns();
		if (!measuring && now >= start) {
			measuring = true;
			memset(&lat, 0, sizeof lat);
			memset(&eng, 0, sizeof eng);
			ops = errs = 0;
			start = now;
			end = now + o.dur_ns;
			cpu0 = cpu_ns();
		}
		for (int i = 0; i < n; i++) {
			const struct onerma_completion *c = &cpl[i];
			uint32_t k = (uint32_t)c->cookie;
			inflight--;
			if (k >= O) {
				fprintf(stderr, PROG " %s: a completion with cookie %" PRIu64 ", never posted\n", test,
					c->cookie);
				return 1;
			}
			if (c->status != ONERMA_STATUS_OK) {
				errs++;
				if (first_err == 0)
					first_err = c->status;
			} else if (o.verify) {
				const uint8_t *l = lmem + (size_t)k * ONERMA_MAX_OP_BYTES;
				for (uint32_t b = 0; b < size; b++) {
					uint8_t want = write ? l[b] : pattern_at(rem_off[k] + b);
					uint8_t got = write ? tmem[rem_off[k] + b] : l[b];
					if (got != want) {
						fprintf(stderr, PROG " %s: %s mismatch at remote offset %" PRIu64 "\n", test,
							write ? "written data" : "data", rem_off[k] + b);
						return 1;
					}
				}
			}
			if (measuring && c->status == ONERMA_STATUS_OK) {
				ops++;
				hist_add(&lat, (uint64_t)(now - post_at[k]));
				hist_add(&eng, c->total_delay_ns);
			}
			if (now < end)
				POST(k);
		}
		onerma_flush(p);
	}
#undef POST
	explicit_bzero(tmpl.key, sizeof tmpl.key);
	res->cpu_ns_per_op = ops > 0 ? (double)(cpu_ns() - cpu0) / (double)ops : 0;
	res->ops = ops;
	res->errs = errs;
	res->first_err = first_err;
	res->secs = (double)(end - start) / 1e9;
	free(slots);
	free(post_at);
	free(rem_off);
	return 0;
}

/* ---- Output ---- */

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static double us(uint64_t ns) { return (double)ns / 1e3; }

static void report(const char *test, const struct result *r, int argc, char **argv)
{
	double ops_s = r->secs > 0 ? (double)r->ops / r->secs : 0;
	double mb_s = ops_s * o.size / 1e6;
	char note[96] = "";
	if (r->errs > 0)
		snprintf(note, sizeof note, "first non-OK status %s", onerma_status_str(r->first_err));
	if (!o.json) {
		printf("%-9s %8s %4s %12s %10s %9s %9s %9s %11s %8s %10s\n", "test", "size", "O", "ops/s", "MB/s",
		       "p50_us", "p99_us", "p99.9_us", "eng_p50_us", "errors", "cpu_ns/op");
		printf("%-9s %8d %4d %12.0f %10.1f %9.2f %9.2f %9.2f %11.2f %8" PRIu64 " %10.1f\n", test, o.size,
		       o.outstanding, ops_s, mb_s, us(hist_quantile(&lat, 0.5)), us(hist_quantile(&lat, 0.99)),
		       us(hist_quantile(&lat, 0.999)), us(hist_quantile(&eng, 0.5)), r->errs, r->cpu_ns_per_op);
		if (note[0])
			printf("note: %s\n", note);
		return;
	}
	/* internal/benchrow.Row's fields, in its order. */
	printf("{\"system\":\"onerma-c\",\"setup\":");
	json_string(o.setup);
	printf(",\"test\":\"%s\",\"size\":%d,\"outstanding\":%d,\"cores\":1", test, o.size, o.outstanding);
	printf(",\"ops_per_sec\":%.3f,\"mb_per_sec\":%.3f", ops_s, mb_s);
	printf(",\"p50_us\":%.3f,\"p99_us\":%.3f,\"p999_us\":%.3f", us(hist_quantile(&lat, 0.5)),
	       us(hist_quantile(&lat, 0.99)), us(hist_quantile(&lat, 0.999)));
	printf(",\"eng_p50_us\":%.3f,\"eng_p99_us\":%.3f,\"eng_p999_us\":%.3f,\"eng_max_us\":%.3f",
	       us(hist_quantile(&eng, 0.5)), us(hist_quantile(&eng, 0.99)), us(hist_quantile(&eng, 0.999)),
	       us(eng.max));
	if (r->ops > 0)
		printf(",\"ops\":%" PRIu64, r->ops);
	printf(",\"errors\":%" PRIu64 ",\"seconds\":%.6f,\"command\":\"", r->errs, r->secs);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (i > 0)
			putchar(' ');
		for (; *a; a++) {
			unsigned char c = (unsigned char)*a;
			if (c == '"' || c == '\\')
				printf("\\%c", c);
			else if (c < 0x20)
				printf("\\u%04x", c);
			else
				putchar(c);
		}
	}
	putchar('"');
	if (note[0]) {
		printf(",\"note\":");
		json_string(note);
	}
	if (r->ops > 0)
		printf(",\"cpu_ns_per_op\":%.3f", r->cpu_ns_per_op);
	printf("}\n");
}

int main(int argc, char **argv)
{
	struct onerma_options opt;
	struct onerma_portal *p;
	struct result res;
	struct target tg;
	const char *test;
	uint32_t region = 0;
	bool write;
	int rc, err;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	test = argv[1];
	if (strcmp(test, "-h") == 0 || strcmp(test, "-help") == 0 || strcmp(test, "--help") == 0 ||
	    strcmp(test, "help") == 0) {
		usage(stderr);
		return 0;
	}
	if (strcmp(test, "read_bw") != 0 && strcmp(test, "read_lat") != 0 && strcmp(test, "write_bw") != 0 &&
	    strcmp(test, "write_lat") != 0) {
		fprintf(stderr, PROG ": unknown command \"%s\"\n", test);
		usage(stderr);
		return 2;
	}
	if ((rc = parse_flags(test, argc - 2, argv + 2)) != 0)
		return rc == 1 ? 0 : rc;
	write = strncmp(test, "write", 5) == 0;
	if (strstr(test, "_lat"))
		o.outstanding = 1;
	if (o.size < 1 || o.size > ONERMA_MAX_OP_BYTES) {
		fprintf(stderr, PROG " %s: -s %d: want 1..%d (one op; portal.Executor's larger transfers are Go's)\n",
			test, o.size, ONERMA_MAX_OP_BYTES);
		return 2;
	}
	if (o.outstanding < 1 || o.outstanding > ONERMA_MAX_ALLOC_SLOTS) {
		fprintf(stderr, PROG " %s: -O %d: want 1..%d\n", test, o.outstanding, ONERMA_MAX_ALLOC_SLOTS);
		return 2;
	}
	if (o.dur_ns <= 0) {
		fprintf(stderr, PROG " %s: -D: want a duration above 0\n", test);
		return 2;
	}
	if (!o.self) {
		char *end;
		unsigned long long v;
		if (!o.server[0]) {
			fprintf(stderr, PROG " %s: need -server or -self\n", test);
			return 2;
		}
		errno = 0;
		v = strtoull(o.region, &end, 0);
		if (!o.region[0] || *end || errno || o.region[0] == '-' || v == 0 || v > UINT32_MAX) {
			fprintf(stderr, PROG " %s: -server needs -region (the id the server printed): \"%s\"\n", test,
				o.region);
			return 2;
		}
		region = (uint32_t)v;
		if (!o.creds[0]) {
			fprintf(stderr,
				PROG " %s: -server needs TLS credentials: -creds DIR (DIR/client.pem, copied from the DIR "
				     "rmactl creds wrote)\n",
				test);
			return 2;
		}
		if (o.verify && write) {
			fprintf(stderr,
				PROG " %s: -verify of a write test needs -self (the written region must be this "
				     "process's)\n",
				test);
			return 2;
		}
		/* The key exchange's inputs are checked before the engine is
		 * asked for anything. */
		if ((err = onerma_keyx_check_creds(o.creds)) != 0)
			return fail(test, "credentials", err, true);
	}
	if (o.region_bytes != 0 && o.region_bytes < (uint64_t)o.size) {
		fprintf(stderr, PROG " %s: -region-bytes %" PRIu64 ": smaller than -s %d\n", test, o.region_bytes,
			o.size);
		return 2;
	}
	memset(&opt, 0, sizeof opt);
	if (strcmp(o.class_flag, "low") == 0)
		opt.service_class = ONERMA_CLASS_LOW;
	else if (strcmp(o.class_flag, "high") == 0)
		opt.service_class = ONERMA_CLASS_HIGH;
	else {
		fprintf(stderr, PROG " %s: -class \"%s\": want low or high\n", test, o.class_flag);
		return 2;
	}
	opt.wait_spins = o.spins;
	if ((err = onerma_dial(o.socket, o.name, &opt, &p)) != 0) {
		if (err == -ONERMA_E_CLASS)
			fprintf(stderr,
				PROG " %s: the engine's policy does not grant class %s to an application named \"%s\"\n",
				test, o.class_flag, o.name);
		else {
			char what[160];
			snprintf(what, sizeof what, "opening a portal named \"%s\"", o.name);
			fail(test, what, err, true);
		}
		return 1;
	}
	memset(&res, 0, sizeof res);
	memset(&tg, 0, sizeof tg);
	rc = o.self ? self_target(test, p, write, &tg) : server_target(test, p, region, write, &tg);
	if (rc == 0)
		rc = run(test, p, write, &tg, &res);
	explicit_bzero(tg.kd, sizeof tg.kd);
	if (rc == 0)
		report(test, &res, argc, argv);
	onerma_close(p);
	return rc;
}
