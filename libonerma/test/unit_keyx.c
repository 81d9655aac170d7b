/*
 * unit_keyx.c - the key exchange client's unit tests: the request and
 * reply bytes against keyx's layout (docs/protocol.md, "Key exchange")
 * with every malformed reply refused; the credential checks of
 * keyx.LoadClient, each refusal with its reason; and dial and fetch
 * against a fake owner (fake_keyx.c): grants, refusals, certificates the
 * client or the owner refuses, an owner that hangs up or never answers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fake_keyx.h"
#include "internal.h"
#include "unit_keyx.h"

static const uint8_t kd[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
			       0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};

/* ---- Bytes ---- */

void test_keyx_request(void)
{
	/* keyx's request layout: version, op, reserved, initiator (network
	 * order), PID and region big-endian. */
	static const uint8_t want[16] = {1, 2, 0, 0, 10, 98, 0, 2, 0x01, 0x02, 0x03, 0x04, 0x00, 0x01, 0x00, 0x02};
	uint8_t b[ONR_KX_REQUEST_LEN];
	CHECK_EQ(onr_kx_encode_request(b, 0x10002, ONERMA_OP_WRITE, 0x0a620002, 0x01020304), 0);
	CHECK(memcmp(b, want, sizeof want) == 0);
	CHECK_EQ(onr_kx_encode_request(b, 0x10002, 0, 0x0a620002, 7), -ONERMA_E_INVALID);
	CHECK_MSG("op 0 unknown");
	CHECK_EQ(onr_kx_encode_request(b, 0x10002, ONERMA_OP_LOOKUP, 0x0a620002, 7), 0); /* keyx grants LOOKUP K_d */
	CHECK_EQ(b[1], ONERMA_OP_LOOKUP);
	CHECK_EQ(onr_kx_encode_request(b, 0x10002, 5, 0x0a620002, 7), -ONERMA_E_INVALID);
	CHECK_MSG("op 5 unknown, want 1 (READ), 2 (WRITE), 3 (REKEY) or 4 (LOOKUP)");
	CHECK_EQ(onr_kx_encode_request(b, 0x10002, 1, 0, 7), -ONERMA_E_INVALID);
	CHECK_MSG("initiator 0.0.0.0 is not a unicast IPv4 address");
	CHECK_EQ(onr_kx_encode_request(b, 0x10002, 1, 0xe0000001, 7), -ONERMA_E_INVALID);
	CHECK_EQ(onr_kx_encode_request(b, 0x10002, 1, 0xffffffff, 7), -ONERMA_E_INVALID);
	CHECK_EQ(onr_kx_encode_request(b, 0x10002, 1, 0x0a620002, 0), -ONERMA_E_INVALID);
	CHECK_MSG("PID 0");
	CHECK_EQ(onr_kx_encode_request(b, 0, 1, 0x0a620002, 7), -ONERMA_E_INVALID);
	CHECK_MSG("region 0");
}

void test_keyx_reply(void)
{
	struct fk_step st;
	struct onerma_grant g;
	uint8_t b[300];

	fk_grant(&st, 0x10001, 1, 0x0a620001, 1 << 20, kd);
	CHECK_EQ(onr_kx_parse_reply(st.body, (size_t)st.len, &g), 0);
	CHECK_EQ(g.region, 0x10001);
	CHECK_EQ(g.op, ONERMA_OP_READ);
	CHECK_EQ(g.owner_addr, 0x0a620001);
	CHECK_EQ(g.size, 1 << 20);
	CHECK(memcmp(g.kd, kd, 16) == 0);
	fk_grant(&st, 0x10001, 3, 0x0a620001, 0x0102030405060708ULL, kd);
	CHECK_EQ(onr_kx_parse_reply(st.body, (size_t)st.len, &g), 0);
	CHECK_EQ(g.size, 0x0102030405060708ULL);

	/* Negative space: each byte of the header and the padding flipped
	 * is refused, with the grant zeroed. */
	static const int fixed[] = {0, 1, 2, 3, 9, 10, 11};
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
		memcpy(b, st.body, 40);
		b[fixed[i]] ^= 0x01;
		int err = onr_kx_parse_reply(b, 40, &g);
		/* Byte 1 flipped makes a refusal of code 1 whose "message"
		 * is the rest of the grant: refused as such or as malformed. */
		CHECK(err == -ONERMA_E_PROTOCOL || (fixed[i] == 1 && err < 0));
		CHECK_EQ(g.size, 0);
	}
	/* The wrong lengths, an owner no engine can have, an empty region. */
	CHECK_EQ(onr_kx_parse_reply(st.body, 39, &g), -ONERMA_E_PROTOCOL);
	CHECK_MSG("grant of 39 bytes, want 40");
	memcpy(b, st.body, 40);
	b[40] = 0;
	CHECK_EQ(onr_kx_parse_reply(b, 41, &g), -ONERMA_E_PROTOCOL);
	CHECK_EQ(onr_kx_parse_reply(st.body, 3, &g), -ONERMA_E_PROTOCOL);
	CHECK_EQ(onr_kx_parse_reply(st.body, 0, &g), -ONERMA_E_PROTOCOL);
	static const uint32_t owners[] = {0, 0xe0000001, 0xffffffff};
	for (size_t i = 0; i < 3; i++) {
		fk_grant(&st, 0x10001, 1, owners[i], 4096, kd);
		CHECK_EQ(onr_kx_parse_reply(st.body, 40, &g), -ONERMA_E_PROTOCOL);
		CHECK_MSG("not a unicast IPv4 address");
		CHECK(g.kd[0] == 0 && g.kd[15] == 0);
	}
	fk_grant(&st, 0x10001, 1, 0x0a620001, 0, kd);
	CHECK_EQ(onr_kx_parse_reply(st.body, 40, &g), -ONERMA_E_PROTOCOL);
	CHECK_MSG("region of 0 bytes");

	/* Each refusal code to its error, the owner's message kept. */
	static const struct {
		uint8_t code;
		int err;
	} codes[] = {{1, ONERMA_E_KX_BAD_REQUEST}, {2, ONERMA_E_KX_NO_REGION}, {3, ONERMA_E_KX_PERMISSION},
		     {4, ONERMA_E_KX_REFUSED},     {5, ONERMA_E_KX_INTERNAL},  {6, ONERMA_E_KX_NOT_GRANTED},
		     {7, ONERMA_E_KX_ADDRESS},     {8, ONERMA_E_KX_REVOKED},   {9, ONERMA_E_KX_CODE},
		     {255, ONERMA_E_KX_CODE}};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		fk_refusal(&st, codes[i].code, "region 0x10002 is not served here");
		CHECK_EQ(onr_kx_parse_reply(st.body, (size_t)st.len, &g), -codes[i].err);
		CHECK(strcmp(onerma_errmsg(), "region 0x10002 is not served here") == 0);
	}
	/* A refusal's message: 1..256 bytes of UTF-8. */
	fk_refusal(&st, 6, "");
	CHECK_EQ(onr_kx_parse_reply(st.body, 4, &g), -ONERMA_E_PROTOCOL);
	memset(b, 'x', sizeof b);
	b[0] = 1, b[1] = 6, b[2] = 0, b[3] = 0;
	CHECK_EQ(onr_kx_parse_reply(b, 4 + 256, &g), -ONERMA_E_KX_NOT_GRANTED);
	CHECK_EQ(strlen(onerma_errmsg()), 256);
	CHECK_EQ(onr_kx_parse_reply(b, 4 + 257, &g), -ONERMA_E_PROTOCOL);
	static const char *const bad_utf8[] = {"\xff", "\xc0\x80", "\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80",
					       "ok\x80"};
	for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
		fk_refusal(&st, 6, bad_utf8[i]);
		CHECK_EQ(onr_kx_parse_reply(st.body, (size_t)st.len, &g), -ONERMA_E_PROTOCOL);
	}
	fk_refusal(&st, 6, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x91");
	CHECK_EQ(onr_kx_parse_reply(st.body, (size_t)st.len, &g), -ONERMA_E_KX_NOT_GRANTED);

	/* The helpers around a grant. */
	struct onerma_op op;
	memset(&op, 0, sizeof op);
	fk_grant(&st, 0x10001, 1, 0x0a620001, 4096, kd);
	CHECK_EQ(onr_kx_parse_reply(st.body, 40, &g), 0);
	onerma_op_set_grant(&op, &g);
	CHECK_EQ(op.remote_addr, 0x0a620001);
	CHECK_EQ(op.remote_region, 0x10001);
	CHECK(memcmp(op.key, kd, 16) == 0);
	onerma_grant_zero(&g);
	CHECK(g.size == 0 && g.region == 0 && g.kd[1] == 0);
	onerma_grant_zero(NULL);
}

/* ---- Credentials ---- */

/* The certificates the tests share, made once. */
static struct {
	bool made;
	struct fk_cert ca, other_ca, expired_ca, server, client, other_client, expired, future, no_eku,
		other_server, server_names, client_as_server, expired_server, client_of_expired_ca;
} kc;

static int make_certs(void)
{
	const long day = 86400;
	if (kc.made)
		return 0;
	if (fk_issue(&kc.ca, "unit", FK_CA, NULL, -60, day, NULL) ||
	    fk_issue(&kc.other_ca, "other", FK_CA, NULL, -60, day, NULL) ||
	    fk_issue(&kc.expired_ca, "old", FK_CA, NULL, -2 * day, -day, NULL) ||
	    fk_issue(&kc.server, "unit server", FK_SERVER, &kc.ca, -60, day, NULL) ||
	    fk_issue(&kc.client, "unit client", FK_CLIENT, &kc.ca, -60, day, NULL) ||
	    fk_issue(&kc.other_client, "other client", FK_CLIENT, &kc.other_ca, -60, day, NULL) ||
	    fk_issue(&kc.expired, "late client", FK_CLIENT, &kc.ca, -2 * day, -day, NULL) ||
	    fk_issue(&kc.future, "early client", FK_CLIENT, &kc.ca, day, 2 * day, NULL) ||
	    fk_issue(&kc.no_eku, "plain", FK_NO_EKU, &kc.ca, -60, day, NULL) ||
	    fk_issue(&kc.other_server, "other server", FK_SERVER, &kc.other_ca, -60, day, NULL) ||
	    fk_issue(&kc.server_names, "named server", FK_SERVER, &kc.ca, -60, day, "DNS:owner.example,IP:10.1.2.3") ||
	    fk_issue(&kc.client_as_server, "client serving", FK_CLIENT, &kc.ca, -60, day, NULL) ||
	    fk_issue(&kc.expired_server, "late server", FK_SERVER, &kc.ca, -2 * day, -day, NULL) ||
	    fk_issue(&kc.client_of_expired_ca, "client of old", FK_CLIENT, &kc.expired_ca, -2 * day, day, NULL))
		return -1;
	kc.made = true;
	return 0;
}

void keyx_test_cleanup(void)
{
	if (!kc.made)
		return;
	struct fk_cert *all[] = {&kc.ca,       &kc.other_ca,     &kc.expired_ca,   &kc.server,
				 &kc.client,   &kc.other_client, &kc.expired,      &kc.future,
				 &kc.no_eku,   &kc.other_server, &kc.server_names, &kc.client_as_server,
				 &kc.expired_server, &kc.client_of_expired_ca};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		fk_free(all[i]);
	kc.made = false;
}

static char dir[64], path[96];

static void mkdir_creds(void)
{
	snprintf(dir, sizeof dir, "/tmp/onerma-unit-kx-%d", (int)getpid());
	mkdir(dir, 0700);
	chmod(dir, 0700);
	snprintf(path, sizeof path, "%s/client.pem", dir);
}

static void rm_creds(void)
{
	unlink(path);
	rmdir(path);
	rmdir(dir);
}

/* bundle writes client.pem and checks it as dial would. */
static int bundle(const struct fk_cert *ca, const struct fk_cert *leaf, EVP_PKEY *key, unsigned mode)
{
	if (fk_write_bundle(path, ca, leaf, key, mode) != 0) {
		fprintf(stderr, "    cannot write %s\n", path);
		failures++;
		return 0;
	}
	return onerma_keyx_check_creds(dir);
}

static void write_raw(const char *data, size_t n, unsigned mode)
{
	FILE *f = fopen(path, "w");
	if (!f || fwrite(data, 1, n, f) != n) {
		failures++;
	}
	if (f)
		fclose(f);
	chmod(path, mode);
}

void test_keyx_creds(void)
{
	if (make_certs() != 0) {
		CHECK(!"making certificates");
		return;
	}
	mkdir_creds();
	CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0600), 0);
	CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0400), 0);

	/* The file: its mode, its owner, its directory, its type, its size. */
	CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0644), -ONERMA_E_CREDS_FILE);
	CHECK_MSG("client.pem: mode 0644 lets group or others read or write it; want 0600 (chmod 600 ");
	CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0620), -ONERMA_E_CREDS_FILE);
	CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0604), -ONERMA_E_CREDS_FILE);
	if (geteuid() == 0) {
		CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0600), 0);
		CHECK_EQ(chown(path, 4242, 4242), 0);
		CHECK_EQ(onerma_keyx_check_creds(dir), -ONERMA_E_CREDS_FILE);
		CHECK_MSG("owned by uid 4242, not by this user (uid 0) or root");
	} else {
		fprintf(stderr, "    (not root: a file of another user is not made)\n");
	}
	CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0600), 0);
	chmod(dir, 0777);
	CHECK_EQ(onerma_keyx_check_creds(dir), -ONERMA_E_CREDS_FILE);
	CHECK_MSG("is writable by group or others (mode 0777)");
	chmod(dir, 01777); /* sticky, as /tmp: others cannot replace the file */
	CHECK_EQ(onerma_keyx_check_creds(dir), 0);
	chmod(dir, 0755);
	CHECK_EQ(onerma_keyx_check_creds(dir), 0);
	chmod(dir, 0700);
	unlink(path);
	CHECK_EQ(onerma_keyx_check_creds(dir), -ENOENT);
	CHECK_MSG("client.pem: No such file or directory");
	mkdir(path, 0700);
	CHECK_EQ(onerma_keyx_check_creds(dir), -ONERMA_E_CREDS_FILE);
	CHECK_MSG("not a regular file");
	rmdir(path);
	static char big[ONR_KX_MAX_BUNDLE + 2];
	memset(big, '\n', sizeof big);
	write_raw(big, ONR_KX_MAX_BUNDLE, 0600);
	CHECK_EQ(onerma_keyx_check_creds(dir), -ONERMA_E_CREDS);
	CHECK_MSG("0 PEM blocks, want 3");
	write_raw(big, ONR_KX_MAX_BUNDLE + 1, 0600);
	CHECK_EQ(onerma_keyx_check_creds(dir), -ONERMA_E_CREDS);
	CHECK_MSG("more than 4096 bytes");
	CHECK_EQ(onerma_keyx_check_creds(""), -ONERMA_E_INVALID);
	CHECK_EQ(onerma_keyx_check_creds(NULL), -ONERMA_E_INVALID);

	/* The role: a server's certificate, or one of no usage, as a client's. */
	CHECK_EQ(bundle(&kc.ca, &kc.server, NULL, 0600), -ONERMA_E_CREDS_ROLE);
	CHECK_MSG("certificate \"unit server\" is not a client certificate (no client-auth usage");
	CHECK_EQ(bundle(&kc.ca, &kc.no_eku, NULL, 0600), -ONERMA_E_CREDS_ROLE);

	/* Validity: the certificate's and the CA's. */
	CHECK_EQ(bundle(&kc.ca, &kc.expired, NULL, 0600), -ONERMA_E_CREDS_EXPIRED);
	CHECK_MSG("certificate \"late client\" expired at 20");
	CHECK_EQ(bundle(&kc.ca, &kc.future, NULL, 0600), -ONERMA_E_CREDS_EXPIRED);
	CHECK_MSG("certificate \"early client\" is not valid before 20");
	CHECK_MSG("(check the clock)");
	CHECK_EQ(bundle(&kc.expired_ca, &kc.client_of_expired_ca, NULL, 0600), -ONERMA_E_CREDS_EXPIRED);
	CHECK_MSG("CA certificate \"old\" expired at");

	/* The bundle: another CA's certificate, another key, another shape. */
	CHECK_EQ(bundle(&kc.ca, &kc.other_client, NULL, 0600), -ONERMA_E_CREDS);
	CHECK_MSG("certificate not signed by the CA");
	CHECK_EQ(bundle(&kc.ca, &kc.client, kc.other_client.key, 0600), -ONERMA_E_CREDS);
	CHECK_MSG("private key does not match the certificate");
	CHECK_EQ(bundle(&kc.client, &kc.client, NULL, 0600), -ONERMA_E_CREDS);
	CHECK_MSG("first certificate is not a CA");
	EVP_PKEY *rsa = EVP_RSA_gen(1024);
	CHECK_EQ(bundle(&kc.ca, &kc.client, rsa, 0600), -ONERMA_E_CREDS);
	CHECK_MSG("private key is RSA, want ECDSA P-256");
	EVP_PKEY_free(rsa);
	EVP_PKEY *p384 = EVP_EC_gen("P-384");
	CHECK_EQ(bundle(&kc.ca, &kc.client, p384, 0600), -ONERMA_E_CREDS);
	CHECK_MSG("want ECDSA P-256");
	EVP_PKEY_free(p384);

	/* The PEM itself: block order, count, trailing bytes. */
	CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0600), 0);
	{
		char buf[ONR_KX_MAX_BUNDLE + 64];
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof buf - 32, f) : 0;
		if (f)
			fclose(f);
		char *key = strstr(buf, "-----BEGIN PRIVATE KEY");
		CHECK(key != NULL);
		if (key) {
			write_raw(buf, (size_t)(key - buf), 0600); /* two certificates, no key */
			CHECK_EQ(onerma_keyx_check_creds(dir), -ONERMA_E_CREDS);
			CHECK_MSG("2 PEM blocks, want 3 (CA certificate, certificate, private key)");
			memcpy(buf + n, "\n\n  junk\n", 9);
			write_raw(buf, n + 9, 0600);
			CHECK_EQ(onerma_keyx_check_creds(dir), -ONERMA_E_CREDS);
			CHECK_MSG("block 4 is not PEM");
			memcpy(buf + n, "\n \t\n", 4);
			write_raw(buf, n + 4, 0600);
			CHECK_EQ(onerma_keyx_check_creds(dir), 0);
			/* The key first. */
			char swapped[ONR_KX_MAX_BUNDLE + 64];
			size_t kl = n - (size_t)(key - buf);
			memcpy(swapped, key, kl);
			memcpy(swapped + kl, buf, (size_t)(key - buf));
			write_raw(swapped, n, 0600);
			CHECK_EQ(onerma_keyx_check_creds(dir), -ONERMA_E_CREDS);
			CHECK_MSG("PEM block 1 is \"PRIVATE KEY\", want \"CERTIFICATE\"");
		}
	}
	rm_creds();
}

/* ---- Dial and fetch ---- */

static int dial_port(uint16_t port, const char *host, int timeout_ms, struct onerma_keyx **kx)
{
	char addr[64];
	snprintf(addr, sizeof addr, "%s:%u", host, port);
	return onerma_keyx_dial(addr, dir, timeout_ms, kx);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void test_keyx_fetch(void)
{
	struct fk_server s;
	struct onerma_keyx *kx = NULL;
	struct onerma_grant g;
	char name[64];
	if (make_certs() != 0) {
		CHECK(!"making certificates");
		return;
	}
	mkdir_creds();
	CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0600), 0);

	memset(&s, 0, sizeof s);
	s.cert = &kc.server;
	s.trust = &kc.ca;
	fk_grant(&s.script[0], 0x10001, 1, 0x0a620001, 1 << 20, kd);
	fk_refusal(&s.script[1], 6, "certificate \"unit client\" is granted nothing on region 0x10002");
	fk_refusal(&s.script[2], 2, "region 0x10003 is not served here");
	fk_grant(&s.script[3], 0x10001, 2, 0x0a620001, 1 << 20, kd);
	fk_refusal(&s.script[4], 8, "certificate \"unit client\" (serial 0x1) was revoked by the CA at 2026-01-01T00:00:00Z");
	s.nscript = 5;
	CHECK_EQ(fk_start(&s), 0);
	CHECK_EQ(dial_port(s.port, "127.0.0.1", 5000, &kx), 0);
	if (!kx) {
		fk_stop(&s);
		rm_creds();
		return;
	}
	onerma_keyx_peer_name(kx, name, sizeof name);
	CHECK(strcmp(name, "unit server") == 0);
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, ONERMA_OP_READ, 0x0a620002, 4242, 5000, &g), 0);
	CHECK_EQ(g.region, 0x10001);
	CHECK_EQ(g.owner_addr, 0x0a620001);
	CHECK_EQ(g.size, 1 << 20);
	CHECK(memcmp(g.kd, kd, 16) == 0);
	{
		static const uint8_t want[16] = {1, 1, 0, 0, 10, 98, 0, 2, 0, 0, 0x10, 0x92, 0, 1, 0, 1};
		CHECK_EQ(s.req_len, 16);
		CHECK(memcmp(s.req, want, 16) == 0);
	}
	/* Refusals that leave the connection usable. */
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10002, ONERMA_OP_READ, 0x0a620002, 4242, 5000, &g), -ONERMA_E_KX_NOT_GRANTED);
	CHECK(strcmp(onerma_errmsg(), "certificate \"unit client\" is granted nothing on region 0x10002") == 0);
	CHECK(g.size == 0 && g.kd[1] == 0);
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10003, ONERMA_OP_READ, 0x0a620002, 4242, 5000, &g), -ONERMA_E_KX_NO_REGION);
	struct onerma_identity id;
	memset(&id, 0, sizeof id);
	id.addr = 0x0a620002;
	id.pid = 4242;
	CHECK_EQ(onerma_keyx_fetch_for(kx, &id, 0x10001, ONERMA_OP_WRITE, 5000, &g), 0);
	CHECK_EQ(g.op, ONERMA_OP_WRITE);
	/* Revoked: the owner hangs up; the connection is done. */
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, ONERMA_OP_READ, 0x0a620002, 4242, 5000, &g), -ONERMA_E_KX_REVOKED);
	CHECK_MSG("was revoked by the CA at");
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, ONERMA_OP_READ, 0x0a620002, 4242, 5000, &g), -ONERMA_E_KX_CLOSED);
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, 9, 0x0a620002, 4242, 5000, &g), -ONERMA_E_KX_CLOSED);
	onerma_keyx_close(kx);
	kx = NULL;
	fk_stop(&s);
	CHECK_EQ(s.nreq, 5);

	/* A grant for what was not asked, an owner that hangs up, one that
	 * never answers. */
	memset(&s, 0, sizeof s);
	s.cert = &kc.server;
	s.trust = &kc.ca;
	fk_grant(&s.script[0], 0x10009, 1, 0x0a620001, 4096, kd);
	fk_grant(&s.script[1], 0x10001, 1, 0x0a620001, 4096, kd);
	s.script[2].action = FK_CLOSE;
	s.script[3].action = FK_SILENT;
	s.nscript = 4;
	CHECK_EQ(fk_start(&s), 0);
	CHECK_EQ(dial_port(s.port, "localhost", 5000, &kx), 0);
	CHECK_EQ(onerma_keyx_fetch(kx, 0, ONERMA_OP_READ, 0x0a620002, 7, 5000, &g), -ONERMA_E_INVALID);
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, ONERMA_OP_READ, 0x0a620002, 7, 5000, &g), -ONERMA_E_PROTOCOL);
	CHECK_MSG("grant for region 0x10009 op 1, asked for region 0x10001 op 1");
	CHECK(g.kd[0] == 0 && g.kd[1] == 0);
	onerma_keyx_close(kx);
	CHECK_EQ(dial_port(s.port, "127.0.0.1", 5000, &kx), 0);
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, ONERMA_OP_READ, 0x0a620002, 7, 5000, &g), 0);
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, ONERMA_OP_READ, 0x0a620002, 7, 5000, &g), -ONERMA_E_KX_CLOSED);
	CHECK_MSG("closed the connection without a reply");
	onerma_keyx_close(kx);
	CHECK_EQ(dial_port(s.port, "127.0.0.1", 5000, &kx), 0);
	int64_t t0 = now_ms();
	CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, ONERMA_OP_READ, 0x0a620002, 7, 200, &g), -ETIMEDOUT);
	int64_t took = now_ms() - t0;
	CHECK(took >= 190 && took < 3000);
	onerma_keyx_close(kx);
	kx = NULL;
	fk_stop(&s);
	rm_creds();
}

void test_keyx_tls(void)
{
	struct fk_server s;
	struct onerma_keyx *kx = NULL;
	struct onerma_grant g;
	if (make_certs() != 0) {
		CHECK(!"making certificates");
		return;
	}
	mkdir_creds();
	CHECK_EQ(bundle(&kc.ca, &kc.client, NULL, 0600), 0);
	struct {
		const struct fk_cert *cert;
		const char *host, *want;
	} cases[] = {
		{&kc.other_server, "127.0.0.1", "the server's certificate is not from the CA of these credentials (\"unit\")"},
		{&kc.server_names, "127.0.0.1", "does not name 127.0.0.1 (it names owner.example, 10.1.2.3)"},
		{&kc.server_names, "localhost", "does not name localhost (it names owner.example, 10.1.2.3)"},
		{&kc.client_as_server, "127.0.0.1", "the server's certificate is not a server certificate"},
		{&kc.expired_server, "127.0.0.1", "the server's certificate has expired or is not yet valid"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(&s, 0, sizeof s);
		s.cert = cases[i].cert;
		s.trust = &kc.ca;
		CHECK_EQ(fk_start(&s), 0);
		CHECK_EQ(dial_port(s.port, cases[i].host, 5000, &kx), -ONERMA_E_SERVER_CERT);
		CHECK_MSG(cases[i].want);
		CHECK(kx == NULL);
		fk_stop(&s);
	}

	/* The owner refuses this client's certificate (it trusts another CA):
	 * with TLS 1.3 its verdict arrives on the first fetch. */
	memset(&s, 0, sizeof s);
	s.cert = &kc.server;
	s.trust = &kc.other_ca;
	CHECK_EQ(fk_start(&s), 0);
	CHECK_EQ(dial_port(s.port, "127.0.0.1", 5000, &kx), 0);
	if (kx) {
		CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, ONERMA_OP_READ, 0x0a620002, 7, 5000, &g), -ONERMA_E_CERT_REFUSED);
		CHECK_MSG("the owner refused this client's certificate");
		CHECK_EQ(onerma_keyx_fetch(kx, 0x10001, ONERMA_OP_READ, 0x0a620002, 7, 5000, &g), -ONERMA_E_KX_CLOSED);
		onerma_keyx_close(kx);
		kx = NULL;
	}
	fk_stop(&s);
	CHECK_EQ(s.handshakes_failed, 1);

	/* An owner of TLS 1.2 at most: its alert in the handshake is a TLS
	 * failure, not a verdict on this client's certificate. */
	memset(&s, 0, sizeof s);
	s.cert = &kc.server;
	s.trust = &kc.ca;
	s.max_version = TLS1_2_VERSION;
	CHECK_EQ(fk_start(&s), 0);
	CHECK_EQ(dial_port(s.port, "127.0.0.1", 5000, &kx), -ONERMA_E_TLS);
	CHECK_MSG("remote error: tls: protocol version");
	fk_stop(&s);
	s.max_version = 0;

	/* Nothing listening: refused at once, retried until the timeout. */
	CHECK_EQ(fk_start(&s), 0);
	uint16_t port = s.port;
	fk_stop(&s);
	int64_t t0 = now_ms();
	CHECK_EQ(dial_port(port, "127.0.0.1", 300, &kx), -ECONNREFUSED);
	CHECK(now_ms() - t0 >= 250);
	CHECK_EQ(onerma_keyx_dial("127.0.0.1", dir, 100, &kx), -ONERMA_E_INVALID);
	CHECK_MSG("want HOST:PORT");
	CHECK_EQ(onerma_keyx_dial("127.0.0.1:x", dir, 100, &kx), -ONERMA_E_INVALID);
	CHECK_EQ(onerma_keyx_dial(":1", dir, 100, &kx), -ONERMA_E_INVALID);
	CHECK_EQ(onerma_keyx_dial("::1:5", dir, 100, &kx), -ONERMA_E_INVALID);
	CHECK_EQ(dial_port(port, "127.0.0.1", 100, NULL), -ONERMA_E_INVALID);
	/* Credentials refused before anything is dialled. */
	chmod(path, 0640);
	CHECK_EQ(dial_port(port, "127.0.0.1", 100, &kx), -ONERMA_E_CREDS_FILE);
	onerma_keyx_close(NULL);
	rm_creds();
}
