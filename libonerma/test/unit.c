/*
 * unit.c - libonerma's unit tests, run under AddressSanitizer and
 * UndefinedBehaviorSanitizer by `make test`. No engine: golden vectors
 * from the Go packages (abi, aesni) for the bytes, and a fake engine
 * (fake_engine.c) for the control protocol and the rings. The closing line
 * is "unit: N passed, N failed".
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fake_engine.h"
#include "internal.h"
#include "unit_keyx.h"

int failures; /* in the running test */

static void hex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sscanf(s + 2 * i, "%2hhx", &out[i]);
}

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static char sock_path[108];

/* ---- Bytes ---- */

/* K_d against aesni.DeriveKey's output for the same inputs. */
static void test_derive_kd(void)
{
	static const char *want[] = {"95806cc657c6ef4693f3f0f1cefcab8b", "3834fbbcbf9cbfadec38375125a293ff",
				     "1113fff1af8b422c9c0d4f595a15cbd9"};
	uint8_t kr[16], kd[16], w[16];
	hex("00112233445566778899aabbccddeeff", kr, 16);
	for (unsigned op = 1; op <= 3; op++) {
		CHECK_EQ(onerma_derive_kd(kr, 0x0a620002, 4242, op, kd), 0);
		hex(want[op - 1], w, 16);
		CHECK(memcmp(kd, w, 16) == 0);
	}
	CHECK_EQ(onerma_derive_kd(kr, 0x0a620002, 4242, 256, kd), -ONERMA_E_INVALID);
}

static void test_addr(void)
{
	uint32_t a = 0;
	char buf[16];
	CHECK_EQ(onerma_addr_parse("10.98.0.2", &a), 0);
	CHECK_EQ(a, 0x0a620002);
	CHECK(strcmp(onerma_addr_format(0xc0a80101, buf), "192.168.1.1") == 0);
	CHECK_EQ(onerma_addr_parse("255.255.255.255", &a), 0);
	const char *bad[] = {"", "1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.4x", "1..2.3", "-1.2.3.4",
			     "1.2.3.1000", "::1"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK_EQ(onerma_addr_parse(bad[i], &a), -ONERMA_E_INVALID);
}

/* The header abi.NewLayout(7, 256, 1024).Encode writes. */
static const char *golden_layout = "31524d410100000080c1000000000000800000000001000000410000000400000700000000000000";

static void test_layout(void)
{
	uint8_t seg[128] = {0};
	struct onr_layout l;
	hex(golden_layout, seg, 40);
	CHECK_EQ(onr_decode_layout(seg, 49536, &l), 0);
	CHECK_EQ(l.size, 49536);
	CHECK_EQ(l.cmd_off, 128);
	CHECK_EQ(l.cpl_off, 16640);
	CHECK_EQ(l.portal, 7);
	CHECK_EQ(onr_decode_layout(seg, 49535, &l), -ONERMA_E_PROTOCOL); /* mapped less than size */
	CHECK_EQ(onr_decode_layout(seg, 127, &l), -ONERMA_E_PROTOCOL);
	/* Every byte of magic, version, size, offsets and capacities matters. */
	for (int i = 0; i < 32; i++) {
		if (i == 6 || i == 7)
			continue; /* reserved */
		for (int bit = 0; bit < 8; bit++) {
			uint8_t s2[128];
			memcpy(s2, seg, 128);
			s2[i] ^= (uint8_t)(1 << bit);
			if (onr_decode_layout(s2, 1 << 30, &l) == 0) {
				fprintf(stderr, "    layout with byte %d bit %d flipped accepted\n", i, bit);
				failures++;
			}
		}
	}
	/* Round trip of the library's own encoder. */
	struct onr_layout w;
	CHECK_EQ(onr_new_layout(7, 256, 1024, &w), 0);
	memset(seg, 0, sizeof seg);
	onr_encode_layout(&w, seg);
	uint8_t g[40];
	hex(golden_layout, g, 40);
	CHECK(memcmp(seg, g, 40) == 0);
	CHECK_EQ(onr_new_layout(0, 3, 4, &w), -ONERMA_E_PROTOCOL);
	CHECK_EQ(onr_new_layout(0, 1, 4, &w), -ONERMA_E_PROTOCOL);
	CHECK_EQ(onr_new_layout(0, 1u << 31, 4, &w), -ONERMA_E_PROTOCOL);
}

/* The bytes abi.Command.Encode writes for the same command. */
static void test_command(void)
{
	struct onr_command c = {.op = 2,
				.slot = 0x01020304,
				.cookie = 0x1122334455667788ull,
				.remote_addr = 0x0a620001,
				.remote_region = 0x00020003,
				.remote_offset = 0x0102030405060708ull,
				.local_region = 0x00050006,
				.length = 4096,
				.local_offset = 0x1112131415161718ull};
	uint8_t b[64], want[64];
	for (int i = 0; i < 16; i++)
		c.key[i] = (uint8_t)(i + 1);
	hex("020000000403020188776655443322110100620a030002000807060504030201060005000010000018171615141312110102030405"
	    "060708090a0b0c0d0e0f10",
	    want, 64);
	memset(b, 0xee, sizeof b);
	onr_encode_command(&c, b);
	CHECK(memcmp(b, want, 64) == 0);

	/* A LOOKUP in its own layout: the tag at 24, the length (u16) at 2,
	 * the bucket offset (u32) at 36; out of range, both saturate. */
	c.op = ONERMA_OP_LOOKUP;
	c.flags = ONERMA_FLAG_LOOKUP_BUCKET;
	c.tag = 0x2122232425262728ull;
	c.remote_offset = 0x31323334;
	hex("040100100403020188776655443322110100620a030002002827262524232221060005003433323118171615141312110102030405"
	    "060708090a0b0c0d0e0f10",
	    want, 64);
	memset(b, 0xee, sizeof b);
	onr_encode_command(&c, b);
	CHECK(memcmp(b, want, 64) == 0);
	c.length = 0x10000;
	c.remote_offset = 1ull << 32;
	onr_encode_command(&c, b);
	CHECK_EQ(onr_get16(b + 2), 0xffff);
	CHECK_EQ(onr_get32(b + 36), 0xffffffffu);

	uint8_t cb[32] = {0};
	struct onerma_completion cpl;
	onr_put64(cb, 99);
	onr_put32(cb + 8, 7);
	cb[12] = ONERMA_STATUS_REMOTE_AUTHENTICATION_FAILURE;
	cb[13] = ONERMA_OP_READ;
	cb[14] = 0xff; /* reserved: ignored */
	onr_put32(cb + 16, 1000);
	onr_put32(cb + 20, 5000);
	onr_put32(cb + 24, 64);
	onr_decode_completion(cb, &cpl);
	CHECK_EQ(cpl.cookie, 99);
	CHECK_EQ(cpl.slot, 7);
	CHECK_EQ(cpl.status, 1);
	CHECK_EQ(cpl.op, 1);
	CHECK_EQ(cpl.reserved, 0);
	CHECK_EQ(cpl.issue_delay_ns, 1000);
	CHECK_EQ(cpl.total_delay_ns, 5000);
	CHECK_EQ(cpl.length, 64);
}

/* ---- The control protocol ---- */

static void test_encode_request(void)
{
	char buf[4096];
	struct onr_request r = {.op = ONR_OP_OPEN, .id = 1, .name = "app", .cmd_cap = 256, .service_class = 1,
				.pin_core = true, .core = 3};
	CHECK(onr_encode_request(&r, buf, sizeof buf) > 0);
	CHECK(strcmp(buf, "{\"v\":1,\"id\":1,\"op\":\"open\",\"name\":\"app\",\"cmd_cap\":256,\"class\":\"high\",\"core\":3}") ==
	      0);
	r = (struct onr_request){.op = ONR_OP_REGISTER_REGION, .id = 9, .memory = 1, .perm = 7};
	hex("00112233445566778899aabbccddeeff", r.key, 16);
	CHECK(onr_encode_request(&r, buf, sizeof buf) > 0);
	CHECK(strcmp(buf, "{\"v\":1,\"id\":9,\"op\":\"register_region\",\"memory\":1,\"perm\":7,\"key\":"
			  "\"00112233445566778899aabbccddeeff\"}") == 0);
	/* ctlmsg.EncodeRequest's bytes for the same request with a layout
	 * (abi.BucketLayout{256, 32, 0, 8, 8, 8, 6, 16, 4, 65538}). */
	r.perm = ONERMA_PERM_REMOTE_LOOKUP | ONERMA_PERM_REMOTE_READ;
	r.layout = (struct onerma_bucket_layout){.bucket_bytes = 256, .entry_bytes = 32, .tag_width = 8, .ptr_off = 8,
						 .ptr_width = 8, .ptr_shift = 6, .len_off = 16, .len_width = 4,
						 .linked = 65538};
	CHECK(onr_encode_request(&r, buf, sizeof buf) > 0);
	CHECK(strcmp(buf, "{\"v\":1,\"id\":9,\"op\":\"register_region\",\"memory\":1,\"perm\":36,\"key\":"
			  "\"00112233445566778899aabbccddeeff\",\"layout\":[256,32,0,8,8,8,6,16,4,65538]}") == 0);
	r = (struct onr_request){.op = ONR_OP_ALLOC_SLOTS, .n = 8};
	CHECK(onr_encode_request(&r, buf, sizeof buf) > 0);
	CHECK(strcmp(buf, "{\"v\":1,\"op\":\"alloc_slots\",\"n\":8}") == 0);
	CHECK_EQ(onr_encode_request(&r, buf, 10), -ONERMA_E_INVALID);
}

static void test_decode_response(void)
{
	struct onr_reply r;
	uint32_t slots[2];
	const char *open_ok = "{\"v\":1,\"id\":5,\"op\":\"open\",\"open\":{\"size\":49536,\"map_size\":51200,\"cmd_cap\":256,"
			      "\"cpl_cap\":1024,\"class\":\"high\",\"max_slots\":64,\"hugetlb\":true,\"addr\":\"10.98.0.2\","
			      "\"pid\":77,\"uid\":1,\"gid\":2,\"name\":\"app\",\"tenant\":\"rmad.sock\",\"new_key\":[1]}}";
	CHECK_EQ(onr_decode_response(open_ok, strlen(open_ok), ONR_OP_OPEN, 5, &r), 0);
	CHECK_EQ(r.seg_size, 49536);
	CHECK_EQ(r.map_size, 51200);
	CHECK_EQ(r.cpl_cap, 1024);
	CHECK_EQ(r.service_class, ONERMA_CLASS_HIGH);
	CHECK_EQ(r.max_slots, 64);
	CHECK(r.hugetlb);
	CHECK_EQ(r.ident.addr, 0x0a620002);
	CHECK_EQ(r.ident.pid, 77);
	CHECK(strcmp(r.ident.tenant, "rmad.sock") == 0);

	struct {
		enum onr_req_op op;
		const char *json;
		int want;
	} cases[] = {
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":5,\"attach\":{\"portal\":3,\"core\":1}}", 0},
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":5,\"attach\":{\"portal\":3,\"core\":64}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":5}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":2,\"id\":5,\"attach\":{\"portal\":3}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"id\":5,\"attach\":{\"portal\":3}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":6,\"attach\":{\"portal\":3}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":5,\"op\":\"open\",\"attach\":{\"portal\":3}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":5,\"attach\":{\"portal\":-3}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":5,\"attach\":{\"portal\":4294967296}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":5,\"attach\":{\"portal\":3.0}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":5,\"attach\":{\"portal\":\"3\"}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":1,\"v\":1,\"id\":5,\"attach\":{\"portal\":3}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "{\"v\":1,\"id\":5,\"attach\":{\"portal\":3}} x", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "[1]", -ONERMA_E_PROTOCOL},
		{ONR_OP_ATTACH, "", -ONERMA_E_PROTOCOL},
		{ONR_OP_ALLOC_SLOTS, "{\"v\":1,\"id\":5,\"slots\":[4,5]}", 0},
		{ONR_OP_ALLOC_SLOTS, "{\"v\":1,\"id\":5,\"slots\":[4]}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ALLOC_SLOTS, "{\"v\":1,\"id\":5,\"slots\":[4,-5]}", -ONERMA_E_PROTOCOL},
		{ONR_OP_ALLOC_SLOTS, "{\"v\":1,\"id\":5,\"slots\":4}", -ONERMA_E_PROTOCOL},
		{ONR_OP_CREATE_REGION, "{\"v\":1,\"id\":5,\"memory\":{\"memory\":1,\"size\":100,\"map_size\":4096}}", 0},
		{ONR_OP_CREATE_REGION, "{\"v\":1,\"id\":5,\"memory\":{\"memory\":0,\"size\":100,\"map_size\":4096}}",
		 -ONERMA_E_PROTOCOL},
		{ONR_OP_CREATE_REGION, "{\"v\":1,\"id\":5,\"memory\":{\"memory\":1,\"size\":100,\"map_size\":99}}",
		 -ONERMA_E_PROTOCOL},
		{ONR_OP_CREATE_REGION,
		 "{\"v\":1,\"id\":5,\"memory\":{\"memory\":1,\"size\":100,\"map_size\":1099511627777}}",
		 -ONERMA_E_PROTOCOL},
		{ONR_OP_REGISTER_REGION,
		 "{\"v\":1,\"id\":5,\"region\":{\"region\":65537,\"size\":100,\"map_size\":4096,\"perm\":4}}", 0},
		{ONR_OP_REGISTER_REGION,
		 "{\"v\":1,\"id\":5,\"region\":{\"region\":65537,\"size\":100,\"map_size\":4096,\"hugetlb\":1}}",
		 -ONERMA_E_PROTOCOL},
		{ONR_OP_IDENTITY, "{\"v\":1,\"id\":5,\"identity\":{\"addr\":\"10.0.0.1\",\"pid\":3}}", 0},
		{ONR_OP_IDENTITY, "{\"v\":1,\"id\":5,\"identity\":{\"addr\":\"::1\",\"pid\":3}}", -ONERMA_E_PROTOCOL},
		{ONR_OP_IDENTITY, "{\"v\":1,\"id\":5,\"identity\":{\"addr\":\"10.0.0.1\",\"pid\":3,\"name\":\"a\\u0000b\"}}",
		 -ONERMA_E_PROTOCOL},
		{ONR_OP_REKEY, "{\"v\":1,\"id\":5}", 0},
		{ONR_OP_REKEY, "{\"v\":1,\"id\":5,\"code\":\"no_region\",\"error\":\"rekey 0x10001: gone\"}",
		 -ONERMA_E_NO_REGION},
		{ONR_OP_REKEY, "{\"v\":1,\"id\":5,\"code\":\"no_region\"}", -ONERMA_E_PROTOCOL},
		{ONR_OP_REKEY, "{\"v\":1,\"id\":5,\"error\":\"x\"}", -ONERMA_E_PROTOCOL},
		{ONR_OP_REKEY, "{\"v\":1,\"code\":\"limit\",\"error\":\"too many connections\"}", -ONERMA_E_LIMIT},
		{ONR_OP_REKEY, "{\"v\":1,\"id\":5,\"code\":\"brand_new\",\"error\":\"x\"}", -ONERMA_E_ENGINE},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		r.slots = slots;
		r.want_slots = 2;
		int got = onr_decode_response(cases[i].json, strlen(cases[i].json), cases[i].op, 5, &r);
		if (got != cases[i].want) {
			fprintf(stderr, "    case %zu %s: got %d, want %d (%s)\n", i, cases[i].json, got, cases[i].want,
				r.error);
			failures++;
		}
	}
	/* Every ctlmsg code maps to its own error. */
	const char *codes[] = {"bad_request", "state",    "slot_cap",    "class",    "no_slots",  "limit",       "quota",
			       "no_region",   "resource", "unavailable", "internal", "too_large", "fds_rejected"};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		CHECK(onr_code_error(codes[i]) != -ONERMA_E_ENGINE);
		for (size_t j = 0; j < i; j++)
			CHECK(onr_code_error(codes[i]) != onr_code_error(codes[j]));
	}
}

static void test_strerror(void)
{
	for (int e = ONERMA_E_BASE + 1; e < ONERMA_E_MAX; e++)
		CHECK(onerma_strerror(-e) != NULL && strcmp(onerma_strerror(-e), "unknown error") != 0);
	CHECK(strcmp(onerma_strerror(-ENOENT), strerror(ENOENT)) == 0);
	CHECK(strcmp(onerma_status_str(ONERMA_STATUS_ENGINE_GONE), "ENGINE_GONE") == 0);
	CHECK(strcmp(onerma_status_str(5), "STATUS_UNKNOWN") == 0);
	CHECK(strcmp(onerma_status_str(ONERMA_STATUS_REMOTE_NOT_FOUND), "REMOTE_NOT_FOUND") == 0);
	CHECK(strcmp(onerma_status_str(ONERMA_STATUS_REMOTE_LOOKUP_BOUNDS), "REMOTE_LOOKUP_BOUNDS") == 0);
	CHECK(strcmp(onerma_status_str(ONERMA_STATUS_REMOTE_LOOKUP_TOO_LARGE), "REMOTE_LOOKUP_TOO_LARGE") == 0);
	CHECK(strcmp(onerma_status_str(38), "STATUS_UNKNOWN") == 0);
}

/* ---- Against the fake engine ---- */
static void test_summary(void);

struct fixture {
	struct fake_engine fe;
	struct onerma_portal *p;
	struct onerma_region *r;
};

static int setup(struct fixture *f, const struct onerma_options *opt)
{
	memset(f, 0, sizeof *f);
	f->fe.slot_base = 100;
	if (fake_start(&f->fe, sock_path) != 0)
		return -1;
	return onerma_dial(sock_path, "unit", opt, &f->p);
}

static void teardown(struct fixture *f)
{
	CHECK_EQ(onerma_close(f->p), 0);
	fake_stop(&f->fe);
}

static struct onerma_op read_op(struct fixture *f, uint32_t slot, uint64_t cookie)
{
	struct onerma_op op;
	memset(&op, 0, sizeof op);
	op.type = ONERMA_OP_READ;
	op.slot = slot;
	op.cookie = cookie;
	op.remote_addr = 0x0a620001;
	op.remote_region = 0x10001;
	memset(op.key, 0xab, sizeof op.key);
	op.local = f->r;
	op.length = 64;
	return op;
}

static void test_dial_and_ops(void)
{
	struct fixture f;
	struct onerma_identity id;
	uint32_t slots[4], s;
	struct onr_command cmds[16];
	struct onerma_completion c[8];
	uint8_t kr[16];
	struct onerma_options opt = {.cmd_cap = 8, .cpl_cap = 8, .wait_spins = -1};

	CHECK_EQ(setup(&f, &opt), 0);
	if (!f.p)
		goto out;
	onerma_portal_identity(f.p, &id);
	CHECK_EQ(id.addr, 0x0a620002);
	CHECK_EQ(id.pid, 4242);
	CHECK(strcmp(id.name, "unit") == 0);
	CHECK_EQ(onerma_portal_cmd_cap(f.p), 8);
	CHECK_EQ(onerma_portal_doorbell(f.p), 1);
	CHECK_EQ(onerma_portal_max_slots(f.p), 64);
	CHECK_EQ(onerma_moderate(f.p, 0, 50), -ONERMA_E_INVALID);
	CHECK_EQ(onerma_moderate(f.p, 16, 0), -ONERMA_E_INVALID);
	CHECK_EQ(onerma_moderate(f.p, 16, ONERMA_MAX_MODERATION_US + 1), -ONERMA_E_INVALID);
	CHECK_EQ(f.fe.mod_count, 0);
	CHECK_EQ(onerma_moderate(f.p, 16, 50), 0);
	CHECK_EQ(f.fe.mod_count, 16);
	CHECK_EQ(f.fe.mod_period_us, 50);

	CHECK_EQ(onerma_alloc_slots(f.p, 4, slots), 0);
	CHECK_EQ(slots[0], 100);
	CHECK_EQ(slots[3], 103);
	CHECK_EQ(onerma_slots(f.p), 4);
	CHECK_EQ(onerma_alloc_slots(f.p, 0, NULL), -ONERMA_E_INVALID);
	CHECK_EQ(onerma_slot_take(f.p, &s), 0);
	CHECK_EQ(onerma_free_slots(f.p), 3);
	CHECK_EQ(onerma_slot_release(f.p, s), 0);
	CHECK_EQ(onerma_slot_release(f.p, s), -ONERMA_E_SLOT);
	CHECK_EQ(onerma_slot_release(f.p, 7), -ONERMA_E_SLOT);

	CHECK_EQ(onerma_register_region(f.p, 8192, ONERMA_PERM_LOCAL_WRITE | ONERMA_PERM_LOCAL_READ, &f.r), 0);
	if (!f.r)
		goto out;
	CHECK_EQ(onerma_region_id(f.r), 0x10001);
	CHECK_EQ(onerma_region_size(f.r), 8192);
	onerma_region_key(f.r, kr);
	CHECK(memcmp(kr, f.fe.last_key, 16) == 0);
	CHECK(!onr_key_zero(kr));
	memset(kr, 0, 16);
	CHECK_EQ(onerma_rekey(f.p, f.r, kr), -ONERMA_E_ZERO_KEY);
	kr[0] = 9;
	CHECK_EQ(onerma_rekey(f.p, f.r, kr), 0);
	CHECK(memcmp(f.fe.last_key, kr, 16) == 0);

	/* Post checks. */
	struct onerma_op op = read_op(&f, slots[0], 1);
	op.type = 9;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_OP);
	op = read_op(&f, slots[0], 1);
	op.length = 0;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_LENGTH);
	op.length = 4097;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_LENGTH);
	op.length = 64;
	op.local_offset = 8192 - 63;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_BOUNDS);
	op.local_offset = UINT64_MAX;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_BOUNDS);
	op = read_op(&f, slots[0], 1);
	op.local = NULL;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_REGION);
	op = read_op(&f, slots[0], 1);
	op.type = ONERMA_OP_REKEY;
	op.remote_offset = 16;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_OP);
	op.remote_offset = 0;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_LENGTH); /* 64 */
	CHECK_EQ(onerma_posted(f.p), 0);

	/* One op: its command's bytes, its completion with every field. */
	op = read_op(&f, slots[0], 77);
	op.local_offset = 128;
	CHECK_EQ(onerma_submit(f.p, &op), 0);
	CHECK_EQ(fake_take(&f.fe, cmds, 16), 1);
	CHECK_EQ(cmds[0].op, ONERMA_OP_READ);
	CHECK_EQ(cmds[0].slot, slots[0]);
	CHECK_EQ(cmds[0].cookie, 77);
	CHECK_EQ(cmds[0].remote_addr, 0x0a620001);
	CHECK_EQ(cmds[0].local_region, 0x10001);
	CHECK_EQ(cmds[0].local_offset, 128);
	CHECK_EQ(cmds[0].length, 64);
	CHECK_EQ(cmds[0].key[15], 0xab);
	CHECK_EQ(onerma_poll(f.p, c, 8), 0);
	struct onerma_completion done = {.cookie = 77, .slot = slots[0], .status = ONERMA_STATUS_OK,
					 .op = ONERMA_OP_READ, .issue_delay_ns = 10, .total_delay_ns = 900, .length = 64};
	fake_complete(&f.fe, &done);
	CHECK_EQ(onerma_wait(f.p, c, 8, 1000), 1);
	CHECK_EQ(c[0].cookie, 77);
	CHECK_EQ(c[0].status, ONERMA_STATUS_OK);
	CHECK_EQ(c[0].issue_delay_ns, 10);
	CHECK_EQ(c[0].total_delay_ns, 900);
	CHECK_EQ(c[0].length, 64);
	CHECK_EQ(onerma_posted(f.p), 0);

	/* A batch: four posts, nothing visible until the one flush. */
	for (int i = 0; i < 4; i++) {
		op = read_op(&f, slots[i], 200 + (uint64_t)i);
		CHECK_EQ(onerma_post(f.p, &op), 0);
	}
	CHECK_EQ(fake_take(&f.fe, cmds, 16), 0);
	CHECK_EQ(onerma_staged(f.p), 4);
	onerma_flush(f.p);
	CHECK_EQ(fake_take(&f.fe, cmds, 16), 4);
	CHECK_EQ(onerma_posted(f.p), 4);
	for (int i = 0; i < 4; i++) {
		done.cookie = cmds[i].cookie;
		done.slot = cmds[i].slot;
		fake_complete(&f.fe, &done);
	}
	CHECK_EQ(onerma_poll(f.p, c, 3), 3);
	CHECK_EQ(onerma_poll(f.p, c, 8), 1);
	CHECK_EQ(onerma_posted(f.p), 0);

	/* The ring holds 8: the ninth post is refused until the engine takes. */
	for (int i = 0; i < 8; i++) {
		op = read_op(&f, 500 + (uint32_t)i, (uint64_t)i); /* slots not owned: stray records */
		CHECK_EQ(onerma_post(f.p, &op), 0);
	}
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_RING_FULL);
	onerma_flush(f.p);
	CHECK_EQ(fake_take(&f.fe, cmds, 16), 8);
	CHECK_EQ(onerma_post(f.p, &op), 0);
	onerma_flush(f.p);
	CHECK_EQ(fake_take(&f.fe, cmds + 8, 8), 1);
	for (int i = 0; i < 9; i++) {
		done.cookie = cmds[i].cookie;
		done.slot = cmds[i].slot;
		done.status = ONERMA_STATUS_BAD_SLOT;
		fake_complete(&f.fe, &done);
		CHECK_EQ(onerma_poll(f.p, c, 1), 1);
	}
	CHECK_EQ(onerma_posted(f.p), 0);

	/* Wait times out, then a completion written while it sleeps wakes it. */
	int64_t t0 = mono_ns();
	CHECK_EQ(onerma_wait(f.p, c, 1, 30), -ETIMEDOUT);
	CHECK(mono_ns() - t0 >= 30 * 1000000LL);

	CHECK_EQ(onerma_deregister_region(f.p, f.r), 0);
	f.r = NULL;
out:
	teardown(&f);
}

/* Bucket layouts: every rule abi.BucketLayout.Validate has, with its
 * message. */
static void test_bucket_layout(void)
{
	const struct onerma_bucket_layout good = {.bucket_bytes = 256, .entry_bytes = 32, .tag_width = 8, .ptr_off = 8,
						  .ptr_width = 8, .len_off = 16, .len_width = 4};
	static const struct {
		struct onerma_bucket_layout l;
		const char *msg;
	} bad[] = {
	    {{.bucket_bytes = 0, .entry_bytes = 1, .tag_width = 1, .ptr_width = 1, .len_width = 1},
	     "bucket size not in 1..4096: 0"},
	    {{.bucket_bytes = 4097, .entry_bytes = 1, .tag_width = 1, .ptr_width = 1, .len_width = 1},
	     "bucket size not in 1..4096: 4097"},
	    {{.bucket_bytes = 64, .entry_bytes = 0, .tag_width = 1, .ptr_width = 1, .len_width = 1},
	     "entry stride not in 1..bucket size: stride 0, bucket 64"},
	    {{.bucket_bytes = 64, .entry_bytes = 65, .tag_width = 1, .ptr_width = 1, .len_width = 1},
	     "entry stride not in 1..bucket size: stride 65, bucket 64"},
	    {{.bucket_bytes = 4096, .entry_bytes = 4033, .tag_width = 1, .ptr_width = 1, .len_width = 1},
	     "the entry leaves no room for a target: stride 4033"},
	    {{.bucket_bytes = 4096, .entry_bytes = 4033, .tag_width = 1, .ptr_width = 1, .ptr_shift = 33, .len_width = 1},
	     "the entry leaves no room for a target: stride 4033"}, /* Validate's order: fit, then shift */
	    {{.bucket_bytes = 64, .entry_bytes = 16, .tag_width = 8, .ptr_width = 8, .ptr_shift = 33, .len_width = 1},
	     "pointer shift above 32: 33"},
	    {{.bucket_bytes = 64, .entry_bytes = 16, .tag_width = 3, .ptr_width = 8, .ptr_shift = 0xffffffffu, .len_width = 1},
	     "pointer shift above 32: 4294967295"}, /* shift, then the fields */
	    {{.bucket_bytes = 64, .entry_bytes = 16, .tag_width = 3, .ptr_width = 1, .len_width = 1},
	     "field width not 1, 2, 4 or 8: tag width 3"},
	    {{.bucket_bytes = 64, .entry_bytes = 16, .tag_width = 8, .ptr_width = 0, .len_width = 1},
	     "field width not 1, 2, 4 or 8: pointer width 0"},
	    {{.bucket_bytes = 64, .entry_bytes = 16, .tag_width = 8, .ptr_off = 9, .ptr_width = 8, .len_width = 1},
	     "field outside the entry: pointer at 9, 8 bytes, entry 16 bytes"},
	    {{.bucket_bytes = 64, .entry_bytes = 16, .tag_width = 8, .ptr_width = 8, .len_off = 0xffffffffu, .len_width = 2},
	     "field outside the entry: length at 4294967295, 2 bytes, entry 16 bytes"},
	};
	CHECK_EQ(onerma_bucket_layout_check(&good), 0);
	struct onerma_bucket_layout shifted = good;
	shifted.ptr_shift = ONERMA_MAX_PTR_SHIFT;
	CHECK_EQ(onerma_bucket_layout_check(&shifted), 0);
	CHECK_EQ(onerma_bucket_layout_check(NULL), -ONERMA_E_INVALID);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_EQ(onerma_bucket_layout_check(&bad[i].l), -ONERMA_E_INVALID);
		CHECK_MSG(bad[i].msg);
	}
	CHECK_EQ(onerma_lookup_target_offset(0), 0);
	CHECK_EQ(onerma_lookup_target_offset(32), 64);
	CHECK_EQ(onerma_lookup_target_offset(64), 64);
	CHECK_EQ(onerma_lookup_target_offset(65), 128);
}

/* A lookup region and a LOOKUP against the fake engine: the layout as
 * register_region sends it, the command as the engine reads it, and what
 * the library refuses before asking. */
static void test_lookup(void)
{
	struct fixture f;
	struct onerma_region *slab = NULL, *index = NULL, *r2 = NULL;
	struct onerma_bucket_layout lay = {.bucket_bytes = 256, .entry_bytes = 32, .tag_width = 8, .ptr_off = 8,
					   .ptr_width = 8, .ptr_shift = 6, .len_off = 16, .len_width = 4};
	struct onerma_bucket_layout got;
	struct onr_command cmds[4];
	struct onerma_completion c[2];
	uint32_t slot;
	uint8_t kr[16] = {1};

	CHECK_EQ(setup(&f, NULL), 0);
	if (!f.p)
		goto out;
	CHECK_EQ(onerma_alloc_slots(f.p, 2, NULL), 0);
	CHECK_EQ(onerma_register_region(f.p, 8192, ONERMA_PERM_LOCAL_WRITE, &f.r), 0);
	CHECK_EQ(f.fe.last_layout_len, -1); /* no layout key */
	CHECK_EQ(onerma_region_layout(f.r, &got), 0);
	CHECK_EQ(got.bucket_bytes, 0);
	CHECK_EQ(onerma_register_region(f.p, 1 << 16, ONERMA_PERM_REMOTE_READ, &slab), 0);
	if (!f.r || !slab)
		goto out;

	/* Refused before the engine is asked. */
	int before = f.fe.requests;
	CHECK_EQ(onerma_register_region(f.p, 4096, ONERMA_PERM_REMOTE_LOOKUP, &r2), -ONERMA_E_INVALID);
	CHECK_MSG("onerma_register_lookup_region");
	CHECK_EQ(onerma_register_lookup_region(f.p, 4096, ONERMA_PERM_REMOTE_READ, &lay, &r2), -ONERMA_E_INVALID);
	CHECK_MSG("want ONERMA_PERM_REMOTE_LOOKUP");
	CHECK_EQ(onerma_register_lookup_region(f.p, 4096, ONERMA_PERM_REMOTE_LOOKUP | 0x40, &lay, &r2), -ONERMA_E_INVALID);
	CHECK_EQ(onerma_register_lookup_region(f.p, 4096, ONERMA_PERM_REMOTE_LOOKUP, NULL, &r2), -ONERMA_E_INVALID);
	CHECK_EQ(onerma_register_lookup_region(f.p, 255, ONERMA_PERM_REMOTE_LOOKUP, &lay, &r2), -ONERMA_E_INVALID);
	CHECK_MSG("size 255, want 256..4294967295 for buckets of 256 bytes");
	CHECK_EQ(onerma_register_lookup_region(f.p, 1ull << 32, ONERMA_PERM_REMOTE_LOOKUP, &lay, &r2), -ONERMA_E_INVALID);
	lay.tag_width = 5;
	CHECK_EQ(onerma_register_lookup_region(f.p, 4096, ONERMA_PERM_REMOTE_LOOKUP, &lay, &r2), -ONERMA_E_INVALID);
	CHECK_MSG("bucket layout: field width not 1, 2, 4 or 8: tag width 5");
	lay.tag_width = 8;
	lay.ptr_shift = 33;
	CHECK_EQ(onerma_register_lookup_region(f.p, 4096, ONERMA_PERM_REMOTE_LOOKUP, &lay, &r2), -ONERMA_E_INVALID);
	CHECK_MSG("bucket layout: pointer shift above 32: 33");
	lay.ptr_shift = 6;
	lay.linked = 0x1ffff;
	CHECK_EQ(onerma_register_lookup_region(f.p, 4096, ONERMA_PERM_REMOTE_LOOKUP, &lay, &r2), -ONERMA_E_INVALID);
	CHECK_MSG("linked region 0x1ffff is not a region of this portal");
	lay.linked = 0;
	CHECK_EQ(onerma_register_lookup_region_key(f.p, 4096, ONERMA_PERM_REMOTE_LOOKUP, &lay, (uint8_t[16]){0}, &r2),
		 -ONERMA_E_ZERO_KEY);
	CHECK_EQ(f.fe.requests, before);
	CHECK(r2 == NULL);

	/* Registered, linked to the slab: the layout's ten integers in
	 * abi.BucketLayout's order. */
	lay.linked = onerma_region_id(slab);
	CHECK_EQ(onerma_register_lookup_region_key(f.p, 1 << 20, ONERMA_PERM_REMOTE_LOOKUP | ONERMA_PERM_REMOTE_READ, &lay,
						   kr, &index),
		 0);
	if (!index)
		goto out;
	CHECK_EQ(f.fe.last_perm, ONERMA_PERM_REMOTE_LOOKUP | ONERMA_PERM_REMOTE_READ);
	CHECK_EQ(f.fe.last_layout_len, 10);
	const uint64_t want[10] = {256, 32, 0, 8, 8, 8, 6, 16, 4, onerma_region_id(slab)};
	for (int i = 0; i < 10; i++)
		CHECK_EQ(f.fe.last_layout[i], want[i]);
	CHECK(memcmp(f.fe.last_key, kr, 16) == 0);
	CHECK_EQ(onerma_region_perm(index), ONERMA_PERM_REMOTE_LOOKUP | ONERMA_PERM_REMOTE_READ);
	CHECK_EQ(onerma_region_layout(index, &got), 1);
	CHECK(memcmp(&got, &lay, sizeof got) == 0);

	/* Post checks. */
	CHECK_EQ(onerma_slot_take(f.p, &slot), 0);
	struct onerma_op op = read_op(&f, slot, 5);
	op.tag = 1;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_OP); /* a tag on a READ */
	op.tag = 0;
	op.flags = ONERMA_FLAG_LOOKUP_BUCKET;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_OP); /* flags on a READ */
	op.type = ONERMA_OP_LOOKUP;
	op.flags = 2;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_OP); /* an unknown flag */
	op.flags = ONERMA_FLAG_LOOKUP_BUCKET;
	op.remote_offset = 1ull << 32;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_OP); /* no bucket offset of a u32 */
	op.remote_offset = 0xffffffffu - 255;
	op.length = 4097;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_LENGTH);
	op.length = 0;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_LENGTH);
	op.length = 4096;
	op.local_offset = 8192 - 4095;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_BOUNDS);
	CHECK_EQ(onerma_posted(f.p), 0);

	/* One LOOKUP: its command as the engine decodes it. */
	op.local_offset = 4096;
	op.tag = 0xfedcba9876543210ull;
	CHECK_EQ(onerma_submit(f.p, &op), 0);
	CHECK_EQ(fake_take(&f.fe, cmds, 4), 1);
	CHECK_EQ(cmds[0].op, ONERMA_OP_LOOKUP);
	CHECK_EQ(cmds[0].flags, ONERMA_FLAG_LOOKUP_BUCKET);
	CHECK_EQ(cmds[0].slot, slot);
	CHECK_EQ(cmds[0].cookie, 5);
	CHECK_EQ(cmds[0].remote_addr, 0x0a620001);
	CHECK_EQ(cmds[0].remote_region, 0x10001);
	CHECK(cmds[0].tag == 0xfedcba9876543210ull);
	CHECK_EQ(cmds[0].remote_offset, 0xffffffffu - 255);
	CHECK_EQ(cmds[0].local_region, onerma_region_id(f.r));
	CHECK_EQ(cmds[0].local_offset, 4096);
	CHECK_EQ(cmds[0].length, 4096);
	CHECK_EQ(cmds[0].key[0], 0xab);
	struct onerma_completion done = {.cookie = 5, .slot = slot, .status = ONERMA_STATUS_REMOTE_NOT_FOUND,
					 .op = ONERMA_OP_LOOKUP, .length = 256};
	fake_complete(&f.fe, &done);
	CHECK_EQ(onerma_wait(f.p, c, 2, 1000), 1);
	CHECK_EQ(c[0].status, ONERMA_STATUS_REMOTE_NOT_FOUND);
	CHECK_EQ(c[0].op, ONERMA_OP_LOOKUP);
	CHECK_EQ(c[0].length, 256);
	CHECK_EQ(onerma_posted(f.p), 0);

	/* Without the flag, and a READ after it, with neither tag nor flags. */
	op.flags = 0;
	op.tag = 7;
	op.cookie = 6;
	CHECK_EQ(onerma_post(f.p, &op), 0);
	op = read_op(&f, 500, 8);
	op.remote_offset = 0x0102030405060708ull;
	CHECK_EQ(onerma_post(f.p, &op), 0);
	onerma_flush(f.p);
	CHECK_EQ(fake_take(&f.fe, cmds, 4), 2);
	CHECK_EQ(cmds[0].flags, 0);
	CHECK_EQ(cmds[0].tag, 7);
	CHECK_EQ(cmds[1].op, ONERMA_OP_READ);
	CHECK_EQ(cmds[1].flags, 0);
	CHECK(cmds[1].remote_offset == 0x0102030405060708ull);
	CHECK_EQ(cmds[1].length, 64);
	for (int i = 0; i < 2; i++) {
		done = (struct onerma_completion){.cookie = cmds[i].cookie, .slot = cmds[i].slot,
						  .status = ONERMA_STATUS_REMOTE_LOOKUP_TOO_LARGE, .op = cmds[i].op};
		fake_complete(&f.fe, &done);
	}
	CHECK_EQ(onerma_wait(f.p, c, 2, 1000), 2);
	CHECK_EQ(onerma_posted(f.p), 0);
	CHECK_EQ(onerma_slot_release(f.p, slot), 0);

	CHECK_EQ(onerma_deregister_region(f.p, index), 0);
out:
	teardown(&f);
}

struct later {
	struct fake_engine *fe;
	struct onerma_completion c;
	int delay_ms;
	int kill;
};

static void *complete_later(void *arg)
{
	struct later *l = arg;
	struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)l->delay_ms * 1000000};
	struct onr_command cmds[4];
	nanosleep(&ts, NULL);
	if (l->kill) {
		fake_kill(l->fe);
		return NULL;
	}
	fake_take(l->fe, cmds, 4);
	fake_complete(l->fe, &l->c);
	return NULL;
}

/* A wait asleep on the doorbell wakes for a completion the engine writes. */
static void test_wait_doorbell(void)
{
	struct fixture f;
	uint32_t slot;
	struct onerma_completion c;
	struct onerma_options opt = {.wait_spins = -1};
	pthread_t t;
	CHECK_EQ(setup(&f, &opt), 0);
	if (!f.p)
		goto out;
	CHECK_EQ(onerma_alloc_slots(f.p, 1, &slot), 0);
	CHECK_EQ(onerma_register_region(f.p, 4096, ONERMA_PERM_LOCAL_WRITE, &f.r), 0);
	struct onerma_op op = read_op(&f, slot, 5);
	CHECK_EQ(onerma_submit(f.p, &op), 0);
	struct later l = {.fe = &f.fe, .c = {.cookie = 5, .slot = slot, .op = 1, .length = 64}, .delay_ms = 30};
	pthread_create(&t, NULL, complete_later, &l);
	int64_t t0 = mono_ns();
	CHECK_EQ(onerma_wait(f.p, &c, 1, 5000), 1);
	CHECK(mono_ns() - t0 < 2000 * 1000000LL);
	CHECK_EQ(c.cookie, 5);
	pthread_join(t, NULL);
out:
	teardown(&f);
}

/* The engine goes away with ops in flight: the completion it wrote, then
 * ENGINE_GONE once for every other op (flushed or only staged), then the
 * error; posts and control calls fail at once. */
static void test_engine_gone(void)
{
	struct fixture f;
	uint32_t slots[8];
	struct onerma_completion c[4];
	struct onerma_options opt = {.wait_spins = -1};
	int seen[8] = {0}, gone = 0, ok = 0, k;
	pthread_t t;

	CHECK_EQ(setup(&f, &opt), 0);
	if (!f.p)
		goto out;
	CHECK_EQ(onerma_alloc_slots(f.p, 8, slots), 0);
	CHECK_EQ(onerma_register_region(f.p, 8192, ONERMA_PERM_LOCAL_WRITE, &f.r), 0);
	for (int i = 0; i < 6; i++) {
		struct onerma_op op = read_op(&f, slots[i], (uint64_t)i);
		CHECK_EQ(onerma_post(f.p, &op), 0);
	}
	onerma_flush(f.p);
	struct onerma_op staged = read_op(&f, slots[6], 6);
	CHECK_EQ(onerma_post(f.p, &staged), 0);   /* staged only */
	staged = read_op(&f, 999, 7);             /* a slot not owned */
	CHECK_EQ(onerma_post(f.p, &staged), 0);
	struct onr_command cmds[8];
	CHECK_EQ(fake_take(&f.fe, cmds, 8), 6);
	struct onerma_completion done = {.cookie = 2, .slot = slots[2], .status = ONERMA_STATUS_BAD_SLOT, .op = 1};
	fake_complete(&f.fe, &done);

	struct later l = {.fe = &f.fe, .delay_ms = 20, .kill = 1};
	pthread_create(&t, NULL, complete_later, &l);
	int64_t t0 = mono_ns();
	while ((k = onerma_wait(f.p, c, 3, 5000)) > 0) {
		for (int i = 0; i < k; i++) {
			CHECK(c[i].cookie < 8);
			if (c[i].cookie < 8)
				seen[c[i].cookie]++;
			if (c[i].status == ONERMA_STATUS_ENGINE_GONE)
				gone++;
			else if (c[i].status == ONERMA_STATUS_BAD_SLOT && c[i].cookie == 2)
				ok++;
		}
	}
	int64_t took = mono_ns() - t0;
	pthread_join(t, NULL);
	CHECK_EQ(k, -ONERMA_E_ENGINE_GONE);
	CHECK_EQ(ok, 1);
	CHECK_EQ(gone, 7);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(seen[i], 1);
	/* The kill came 20 ms in; portal's bound is 100 ms after the close. */
	CHECK(took < 120 * 1000000LL);
	CHECK_EQ(onerma_gone(f.p), 1);
	CHECK_EQ(onerma_poll(f.p, c, 4), -ONERMA_E_ENGINE_GONE);
	CHECK_EQ(onerma_post(f.p, &staged), -ONERMA_E_ENGINE_GONE);
	CHECK_EQ(onerma_alloc_slots(f.p, 1, NULL), -ONERMA_E_ENGINE_GONE);
	CHECK_EQ(onerma_posted(f.p), 0);

	/* Redial: the engine is back on the same socket. */
	struct onerma_portal *np = NULL;
	CHECK_EQ(onerma_redial(f.p, 5000, &np), 0);
	if (np) {
		CHECK_EQ(onerma_gone(np), 0);
		CHECK_EQ(onerma_slots(np), 0);
		CHECK_EQ(onerma_close(np), 0);
	}
out:
	teardown(&f);
}

/* Refusals map to their codes, with the engine's message and quota. */
static void test_refusals(void)
{
	struct fixture f;
	struct fake_engine fe;
	struct onerma_portal *p = NULL;
	CHECK_EQ(setup(&f, NULL), 0);
	f.fe.refuse_op = "alloc_slots";
	f.fe.refuse_code = "slot_cap";
	CHECK_EQ(onerma_alloc_slots(f.p, 9, NULL), -ONERMA_E_SLOT_CAP);
	CHECK(strstr(onerma_errmsg(), "refused by the fake engine: asked for 9 more") != NULL);
	f.fe.refuse_op = "create_region";
	f.fe.refuse_code = "quota";
	f.fe.refuse_quota = "memory_bytes";
	CHECK_EQ(onerma_register_region(f.p, 4096, ONERMA_PERM_ALL, &f.r), -ONERMA_E_QUOTA);
	CHECK(strcmp(onerma_errquota(), "memory_bytes") == 0);
	CHECK(f.r == NULL);
	teardown(&f);

	/* A refused open, and a segment whose header is wrong. */
	memset(&fe, 0, sizeof fe);
	fe.refuse_op = "open";
	fe.refuse_code = "class";
	CHECK_EQ(fake_start(&fe, sock_path), 0);
	struct onerma_options high = {.service_class = ONERMA_CLASS_HIGH};
	CHECK_EQ(onerma_dial(sock_path, "unit", &high, &p), -ONERMA_E_CLASS);
	CHECK(p == NULL);
	fake_stop(&fe);
	memset(&fe, 0, sizeof fe);
	fe.bad_magic = 1;
	CHECK_EQ(fake_start(&fe, sock_path), 0);
	CHECK_EQ(onerma_dial(sock_path, "unit", NULL, &p), -ONERMA_E_PROTOCOL);
	CHECK(strstr(onerma_errmsg(), "magic") != NULL);
	fake_stop(&fe);

	CHECK_EQ(onerma_dial(sock_path, "unit", NULL, &p), -ENOENT);
	CHECK_EQ(onerma_dial(sock_path, "bad name", NULL, &p), -ONERMA_E_INVALID);
	struct onerma_options caps = {.cmd_cap = 3};
	CHECK_EQ(onerma_dial(sock_path, "unit", &caps, &p), -ONERMA_E_INVALID);
}

/* The engine writes impossible ring indices: the portal says so. */
static void test_corrupt_rings(void)
{
	struct fixture f;
	uint32_t slot;
	struct onerma_completion c;
	CHECK_EQ(setup(&f, NULL), 0);
	CHECK_EQ(onerma_alloc_slots(f.p, 1, &slot), 0);
	CHECK_EQ(onerma_register_region(f.p, 4096, ONERMA_PERM_LOCAL_WRITE, &f.r), 0);
	atomic_store(fake_cpl_prod(&f.fe), 1000);
	CHECK_EQ(onerma_poll(f.p, &c, 1), -ONERMA_E_RING_CORRUPT);
	atomic_store(fake_cmd_cons(&f.fe), 1000); /* ahead of what was posted */
	struct onerma_op op = read_op(&f, slot, 1);
	for (int i = 0; i < 64 && onerma_post(f.p, &op) == 0; i++)
		;
	CHECK_EQ(onerma_post(f.p, &op), -ONERMA_E_RING_CORRUPT);
	teardown(&f);
}

/* test_summary: a portal the engine gives a summary doorbell says so in
 * its segment and rings its bit (the fake engine's portal 3) after a flush
 * that published, never after one that did not; with an engine that
 * refuses summary (an older one) the portal works without one. */
static void test_summary(void)
{
	struct onerma_options opt = {.wait_spins = -1};
	struct onr_command cmds[4];
	for (int none = 0; none < 2; none++) {
		struct fixture f;
		uint32_t slot;
		memset(&f, 0, sizeof f);
		f.fe.slot_base = 100;
		f.fe.no_summary = none;
		CHECK_EQ(fake_start(&f.fe, sock_path), 0);
		CHECK_EQ(onerma_dial(sock_path, "unit", &opt, &f.p), 0);
		if (!f.p) {
			fake_stop(&f.fe);
			continue;
		}
		CHECK_EQ(onerma_portal_summary(f.p), !none);
		CHECK_EQ(onr_get32(f.fe.seg + ONR_SEGMENT_SUMMARY_OFF), none ? 0 : ONR_SUMMARY_ON);
		CHECK(none ? f.fe.sum == NULL : f.fe.sum != NULL);
		CHECK_EQ(onerma_alloc_slots(f.p, 1, &slot), 0);
		CHECK_EQ(onerma_register_region(f.p, 4096, ONERMA_PERM_LOCAL_WRITE, &f.r), 0);
		struct onerma_op op = read_op(&f, slot, 5);
		CHECK_EQ(onerma_post(f.p, &op), 0);
		if (f.fe.sum)
			CHECK_EQ(atomic_load(f.fe.sum), 0); /* staged, not flushed */
		onerma_flush(f.p);
		CHECK_EQ(fake_take(&f.fe, cmds, 4), 1);
		if (f.fe.sum) {
			CHECK_EQ(atomic_load(f.fe.sum), (uint64_t)1 << 3);
			atomic_store(f.fe.sum, 0); /* the engine takes it */
			onerma_flush(f.p);         /* nothing new: no ring */
			CHECK_EQ(atomic_load(f.fe.sum), 0);
		}
		teardown(&f);
	}
}

int main(void)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"derive_kd", test_derive_kd},
		{"addr", test_addr},
		{"layout", test_layout},
		{"command_and_completion", test_command},
		{"encode_request", test_encode_request},
		{"decode_response", test_decode_response},
		{"strerror", test_strerror},
		{"dial_and_ops", test_dial_and_ops},
		{"bucket_layout", test_bucket_layout},
		{"lookup", test_lookup},
		{"wait_doorbell", test_wait_doorbell},
		{"summary", test_summary},
		{"engine_gone", test_engine_gone},
		{"refusals", test_refusals},
		{"corrupt_rings", test_corrupt_rings},
		{"keyx_request", test_keyx_request},
		{"keyx_reply", test_keyx_reply},
		{"keyx_creds", test_keyx_creds},
		{"keyx_fetch", test_keyx_fetch},
		{"keyx_tls", test_keyx_tls},
	};
	int passed = 0, failed = 0;
	snprintf(sock_path, sizeof sock_path, "/tmp/onerma-unit-%d.sock", (int)getpid());
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		failures = 0;
		tests[i].fn();
		printf("%s %s\n", failures ? "FAIL" : "ok  ", tests[i].name);
		fflush(stdout);
		if (failures)
			failed++;
		else
			passed++;
	}
	keyx_test_cleanup();
	printf("unit: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
