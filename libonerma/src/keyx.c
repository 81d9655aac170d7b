/*
 * keyx.c - the reader's side of the key exchange (Go: package keyx, its
 * Dial, Conn.Fetch and LoadClient): client credentials loaded from the
 * directory `rmactl creds` writes and checked as keyx.LoadFile checks them,
 * a TLS 1.3 session with mutual authentication under the credentials' CA
 * (OpenSSL), and the framed 16-byte request and its reply
 * (docs/protocol.md, "Key exchange").
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "internal.h"

/* An owner's refusal codes (keyx.Code) and the error each maps to. */
static const struct {
	uint8_t code;
	int err;
	const char *name; /* keyx.Code.String */
} kx_codes[] = {
	{1, ONERMA_E_KX_BAD_REQUEST, "bad request"},
	{2, ONERMA_E_KX_NO_REGION, "unknown region"},
	{3, ONERMA_E_KX_PERMISSION, "permission denied"},
	{4, ONERMA_E_KX_REFUSED, "refused"},
	{5, ONERMA_E_KX_INTERNAL, "internal error"},
	{6, ONERMA_E_KX_NOT_GRANTED, "not granted"},
	{7, ONERMA_E_KX_ADDRESS, "address not granted"},
	{8, ONERMA_E_KX_REVOKED, "certificate revoked"},
};

int onr_kx_code_error(uint8_t code)
{
	for (size_t i = 0; i < sizeof kx_codes / sizeof kx_codes[0]; i++)
		if (kx_codes[i].code == code)
			return -kx_codes[i].err;
	return -ONERMA_E_KX_CODE;
}

/* ---- Messages ---- */

static void put_be32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* unicast4 is keyx's: an IPv4 address an engine can have. */
static bool unicast4(uint32_t a) { return a != 0 && (a >> 28) != 0xe && a != 0xffffffffu; }

int onr_kx_encode_request(uint8_t b[ONR_KX_REQUEST_LEN], uint32_t region, int op, uint32_t initiator,
			  uint32_t identity)
{
	char ip[16];
	if (op != ONERMA_OP_READ && op != ONERMA_OP_WRITE && op != ONERMA_OP_REKEY && op != ONERMA_OP_LOOKUP)
		return onr_fail(-ONERMA_E_INVALID,
				"keyx: request: op %d unknown, want 1 (READ), 2 (WRITE), 3 (REKEY) or 4 (LOOKUP)", op);
	if (!unicast4(initiator))
		return onr_fail(-ONERMA_E_INVALID, "keyx: request: initiator %s is not a unicast IPv4 address",
				onerma_addr_format(initiator, ip));
	if (identity == 0)
		return onr_fail(-ONERMA_E_INVALID, "keyx: request: initiator PID 0");
	if (region == 0)
		return onr_fail(-ONERMA_E_INVALID, "keyx: request: region 0 is never registered");
	memset(b, 0, ONR_KX_REQUEST_LEN);
	b[0] = ONR_KX_VERSION;
	b[1] = (uint8_t)op;
	put_be32(b + 4, initiator);
	put_be32(b + 8, identity);
	put_be32(b + 12, region);
	return 0;
}

/* utf8_valid is utf8.Valid: well-formed UTF-8, no surrogates, no overlong
 * forms, nothing above U+10FFFF. */
static bool utf8_valid(const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint8_t c = s[i];
		size_t k;
		uint32_t cp, min;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			k = 1, cp = c & 0x1f, min = 0x80;
		else if (c >= 0xe0 && c <= 0xef)
			k = 2, cp = c & 0x0f, min = 0x800;
		else if (c >= 0xf0 && c <= 0xf4)
			k = 3, cp = c & 0x07, min = 0x10000;
		else
			return false;
		if (n - i <= k)
			return false;
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + j] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

int onr_kx_parse_reply(const uint8_t *b, size_t len, struct onerma_grant *g)
{
	char ip[16];
	memset(g, 0, sizeof *g);
	if (len < 4)
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: reply of %zu bytes, want at least 4", len);
	if (b[0] != ONR_KX_VERSION)
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: reply version %u, want %u", b[0], ONR_KX_VERSION);
	if (b[2] != 0 || b[3] != 0)
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: reply reserved field %#04x, want 0", b[2] << 8 | b[3]);
	if (b[1] != 0) {
		size_t n = len - 4;
		int err = onr_kx_code_error(b[1]);
		if (n == 0 || n > ONR_KX_MAX_MSG || !utf8_valid(b + 4, n))
			return onr_fail(-ONERMA_E_PROTOCOL, "keyx: refusal (code %u) with a malformed message of %zu bytes",
					b[1], n);
		/* The owner's own words, as they came. */
		return onr_fail(err, "%.*s", (int)n, (const char *)(b + 4));
	}
	if (len != ONR_KX_GRANT_LEN)
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: grant of %zu bytes, want %u", len, ONR_KX_GRANT_LEN);
	if (b[9] != 0 || b[10] != 0 || b[11] != 0)
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: grant: non-zero padding");
	g->region = get_be32(b + 4);
	g->op = b[8];
	g->owner_addr = get_be32(b + 12);
	g->size = (uint64_t)get_be32(b + 16) << 32 | get_be32(b + 20);
	if (!unicast4(g->owner_addr)) {
		onerma_addr_format(g->owner_addr, ip);
		memset(g, 0, sizeof *g);
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: grant: owner %s is not a unicast IPv4 address", ip);
	}
	if (g->size == 0) {
		memset(g, 0, sizeof *g);
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: grant: region of 0 bytes");
	}
	memcpy(g->kd, b + 24, ONERMA_KEY_SIZE);
	return 0;
}

void onerma_grant_zero(struct onerma_grant *g)
{
	if (g)
		OPENSSL_cleanse(g, sizeof *g);
}

void onerma_op_set_grant(struct onerma_op *op, const struct onerma_grant *g)
{
	op->remote_addr = g->owner_addr;
	op->remote_region = g->region;
	memcpy(op->key, g->kd, ONERMA_KEY_SIZE);
}

/* ---- Credentials ---- */

/* cn copies the subject common name of c into buf. */
static const char *cn(X509 *c, char *buf, int n)
{
	if (!c || X509_NAME_get_text_by_NID(X509_get_subject_name(c), NID_commonName, buf, n) < 0)
		buf[0] = 0;
	return buf;
}

/* rfc3339 formats an ASN1 time as Go's time.RFC3339 in UTC. */
static const char *rfc3339(const ASN1_TIME *t, char *buf, size_t n)
{
	struct tm tm;
	if (!t || ASN1_TIME_to_tm(t, &tm) != 1 || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, n, "?");
	return buf;
}

void onr_kx_creds_free(struct onr_creds *c)
{
	X509_free(c->ca);
	X509_free(c->leaf);
	EVP_PKEY_free(c->key); /* OpenSSL clears the private scalar as it frees it */
	memset(c, 0, sizeof *c);
}

/* only_space reports whether b[0..n) is empty or white space (Go's
 * bytes.TrimSpace of the rest of a bundle). */
static bool only_space(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' && b[i] != '\v' && b[i] != '\f')
			return false;
	return true;
}

/* parse_bundle is keyx's parseCredentials: exactly a CA certificate, a
 * certificate it signed and that certificate's ECDSA P-256 private key in
 * PKCS #8. Its messages give the reason alone; 0 or -ONERMA_E_CREDS. */
int onr_kx_parse_bundle(const uint8_t *data, size_t len, struct onr_creds *out, char *why, size_t whyn)
{
	static const char *const want[3] = {"CERTIFICATE", "CERTIFICATE", "PRIVATE KEY"};
	unsigned char *der[3] = {NULL, NULL, NULL};
	long derlen[3] = {0, 0, 0};
	int nblocks = 0, ret = -ONERMA_E_CREDS;
	BIO *bio;
	memset(out, 0, sizeof *out);
	why[0] = 0;
	if (len > INT32_MAX || !(bio = BIO_new_mem_buf(data, (int)len))) {
		snprintf(why, whyn, "out of memory");
		return -ENOMEM;
	}
	for (;;) {
		char *name = NULL, *header = NULL;
		unsigned char *d = NULL;
		long dl = 0;
		size_t rest = (size_t)BIO_pending(bio);
		if (only_space(data + (len - rest), rest))
			break;
		ERR_clear_error();
		if (PEM_read_bio(bio, &name, &header, &d, &dl) != 1) {
			snprintf(why, whyn, "block %d is not PEM", nblocks + 1);
			goto out;
		}
		OPENSSL_free(header);
		if (nblocks < 3) {
			if (strcmp(name, want[nblocks]) != 0) {
				snprintf(why, whyn, "PEM block %d is \"%.40s\", want \"%s\"", nblocks + 1, name, want[nblocks]);
				OPENSSL_free(name);
				OPENSSL_clear_free(d, (size_t)dl);
				nblocks++;
				goto out;
			}
			der[nblocks] = d;
			derlen[nblocks] = dl;
		} else {
			OPENSSL_clear_free(d, (size_t)dl);
		}
		OPENSSL_free(name);
		nblocks++;
	}
	if (nblocks != 3) {
		snprintf(why, whyn, "%d PEM blocks, want 3 (CA certificate, certificate, private key)", nblocks);
		goto out;
	}
	{
		const unsigned char *p = der[0];
		if (!(out->ca = d2i_X509(NULL, &p, derlen[0])) || p != der[0] + derlen[0]) {
			snprintf(why, whyn, "CA certificate: malformed");
			goto out;
		}
		if (!(X509_get_extension_flags(out->ca) & EXFLAG_CA)) {
			snprintf(why, whyn, "first certificate is not a CA");
			goto out;
		}
		p = der[1];
		if (!(out->leaf = d2i_X509(NULL, &p, derlen[1])) || p != der[1] + derlen[1]) {
			snprintf(why, whyn, "certificate: malformed");
			goto out;
		}
		/* x509's CheckSignatureFrom: a CA whose key usage, if it has one,
		 * allows signing certificates, and its signature. */
		EVP_PKEY *capub = X509_get0_pubkey(out->ca);
		if (!(X509_get_key_usage(out->ca) & KU_KEY_CERT_SIGN) || !capub || X509_verify(out->leaf, capub) != 1) {
			snprintf(why, whyn, "certificate not signed by the CA");
			goto out;
		}
		p = der[2];
		PKCS8_PRIV_KEY_INFO *p8 = d2i_PKCS8_PRIV_KEY_INFO(NULL, &p, derlen[2]);
		if (!p8 || p != der[2] + derlen[2]) {
			PKCS8_PRIV_KEY_INFO_free(p8);
			snprintf(why, whyn, "private key: malformed PKCS #8");
			goto out;
		}
		out->key = EVP_PKCS82PKEY(p8);
		PKCS8_PRIV_KEY_INFO_free(p8);
		char group[64] = "";
		size_t gl = 0;
		if (!out->key || !EVP_PKEY_is_a(out->key, "EC") ||
		    EVP_PKEY_get_group_name(out->key, group, sizeof group, &gl) != 1 || strcmp(group, "prime256v1") != 0) {
			snprintf(why, whyn, "private key is %s%s%s, want ECDSA P-256",
				 out->key ? EVP_PKEY_get0_type_name(out->key) : "unreadable", group[0] ? " on " : "",
				 group);
			goto out;
		}
		EVP_PKEY *pub = X509_get0_pubkey(out->leaf);
		if (!pub || EVP_PKEY_eq(pub, out->key) != 1) {
			snprintf(why, whyn, "private key does not match the certificate");
			goto out;
		}
	}
	ret = 0;
out:
	for (int i = 0; i < 3; i++)
		OPENSSL_clear_free(der[i], der[i] ? (size_t)derlen[i] : 0);
	BIO_free(bio);
	ERR_clear_error();
	if (ret != 0)
		onr_kx_creds_free(out);
	return ret;
}

/* check_valid is keyx's checkValid: the CA's and the certificate's
 * validity at now. */
static int check_valid(const struct onr_creds *c, time_t now, char *why, size_t whyn)
{
	struct {
		const char *what;
		X509 *cert;
	} certs[2] = {{"CA certificate", c->ca}, {"certificate", c->leaf}};
	for (int i = 0; i < 2; i++) {
		char name[128], when[32];
		if (X509_cmp_time(X509_get0_notAfter(certs[i].cert), &now) < 0) {
			snprintf(why, whyn, "%s \"%s\" expired at %s", certs[i].what, cn(certs[i].cert, name, sizeof name),
				 rfc3339(X509_get0_notAfter(certs[i].cert), when, sizeof when));
			return -ONERMA_E_CREDS_EXPIRED;
		}
		if (X509_cmp_time(X509_get0_notBefore(certs[i].cert), &now) > 0) {
			snprintf(why, whyn, "%s \"%s\" is not valid before %s (check the clock)", certs[i].what,
				 cn(certs[i].cert, name, sizeof name),
				 rfc3339(X509_get0_notBefore(certs[i].cert), when, sizeof when));
			return -ONERMA_E_CREDS_EXPIRED;
		}
	}
	return 0;
}

/* check_role is keyx's checkRole: the certificate names the usage of its
 * role in its extended key usage. */
static int check_role(const struct onr_creds *c, bool server, char *why, size_t whyn)
{
	uint32_t flags = X509_get_extension_flags(c->leaf), xku = X509_get_extended_key_usage(c->leaf);
	bool has = (flags & EXFLAG_XKUSAGE) && (xku & (server ? XKU_SSL_SERVER : XKU_SSL_CLIENT));
	char name[128];
	if (has)
		return 0;
	if (server)
		snprintf(why, whyn,
			 "certificate \"%s\" is not a server certificate (no server-auth usage; use server credentials, "
			 "server.pem)",
			 cn(c->leaf, name, sizeof name));
	else
		snprintf(why, whyn,
			 "certificate \"%s\" is not a client certificate (no client-auth usage; use client credentials, "
			 "client.pem, or rmactl creds issue)",
			 cn(c->leaf, name, sizeof name));
	return -ONERMA_E_CREDS_ROLE;
}

/* read_private is keyx's readPrivate: the file's bytes (at most
 * ONR_KX_MAX_BUNDLE) into buf, refusing a file that is not a regular file,
 * that group or others may read or write, that belongs to another user
 * (root's are accepted), or in a directory group or others may write to
 * (without the sticky bit). */
static int read_private(const char *path, uint8_t *buf, size_t *len)
{
	struct stat st, dst;
	char dir[4096];
	const char *slash;
	size_t got = 0;
	int fd, err;

	/* O_NONBLOCK: a FIFO put in its place is refused, not waited on. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		err = errno;
		return onr_fail(-err, "keyx: credentials: open %s: %s", path, strerror(err));
	}
	if (fstat(fd, &st) != 0) {
		err = errno;
		close(fd);
		return onr_fail(-err, "keyx: credentials %s: %s", path, strerror(err));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return onr_fail(-ONERMA_E_CREDS_FILE, "keyx: credentials %s: not a regular file", path);
	}
	if (st.st_mode & 077) {
		close(fd);
		return onr_fail(-ONERMA_E_CREDS_FILE,
				"keyx: credentials %s: mode %04o lets group or others read or write it; want 0600 "
				"(chmod 600 %s)",
				path, (unsigned)(st.st_mode & 07777), path);
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		close(fd);
		return onr_fail(-ONERMA_E_CREDS_FILE,
				"keyx: credentials %s: owned by uid %u, not by this user (uid %u) or root", path,
				(unsigned)st.st_uid, (unsigned)geteuid());
	}
	slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == path)
		snprintf(dir, sizeof dir, "/");
	else
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	if (stat(dir, &dst) != 0) {
		err = errno;
		close(fd);
		return onr_fail(-err, "keyx: credentials %s: %s: %s", path, dir, strerror(err));
	}
	if ((dst.st_mode & 022) && !(dst.st_mode & S_ISVTX)) {
		close(fd);
		return onr_fail(-ONERMA_E_CREDS_FILE,
				"keyx: credentials %s: directory %s is writable by group or others (mode %04o): they "
				"could replace the credentials; want 0700",
				path, dir, (unsigned)(dst.st_mode & 0777));
	}
	for (;;) {
		ssize_t n = read(fd, buf + got, ONR_KX_MAX_BUNDLE + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = errno;
			close(fd);
			OPENSSL_cleanse(buf, got);
			return onr_fail(-err, "keyx: credentials %s: %s", path, strerror(err));
		}
		if (n == 0)
			break;
		got += (size_t)n;
		if (got > ONR_KX_MAX_BUNDLE) {
			close(fd);
			OPENSSL_cleanse(buf, got);
			return onr_fail(-ONERMA_E_CREDS, "keyx: credentials %s: more than %d bytes", path,
					ONR_KX_MAX_BUNDLE);
		}
	}
	close(fd);
	*len = got;
	return 0;
}

int onr_kx_load_creds(const char *path, bool server, struct onr_creds *out)
{
	uint8_t buf[ONR_KX_MAX_BUNDLE + 1];
	char why[512];
	size_t len = 0;
	int err;

	memset(out, 0, sizeof *out);
	if ((err = read_private(path, buf, &len)) != 0)
		return err;
	err = onr_kx_parse_bundle(buf, len, out, why, sizeof why);
	OPENSSL_cleanse(buf, sizeof buf);
	if (err == 0 && (err = check_valid(out, time(NULL), why, sizeof why)) == 0)
		err = check_role(out, server, why, sizeof why);
	if (err != 0) {
		onr_kx_creds_free(out);
		return onr_fail(err, "keyx: credentials %s: %s", path, why);
	}
	return 0;
}

/* client_path is creds_dir/client.pem (keyx.ClientFile). */
static int client_path(const char *dir, char *buf, size_t n)
{
	if (!dir || !*dir)
		return onr_fail(-ONERMA_E_INVALID, "keyx: no credentials directory (the DIR `rmactl creds DIR` wrote)");
	if ((size_t)snprintf(buf, n, "%s/%s", dir, ONR_KX_CLIENT_FILE) >= n)
		return onr_fail(-ENAMETOOLONG, "keyx: credentials directory name too long");
	return 0;
}

int onerma_keyx_check_creds(const char *creds_dir)
{
	struct onr_creds c;
	char path[4096];
	int err;
	if ((err = client_path(creds_dir, path, sizeof path)) != 0)
		return err;
	if ((err = onr_kx_load_creds(path, false, &c)) != 0)
		return err;
	onr_kx_creds_free(&c);
	return 0;
}

/* ---- The connection ---- */

struct onerma_keyx {
	SSL_CTX *ctx;
	SSL *ssl;
	int fd;
	bool dead;
	/* answered: a reply arrived, so the owner accepted this client's
	 * certificate; a later TLS alert is about something else. */
	bool answered;
	char addr[300]; /* as dialled, for messages */
	char ca_name[128];
	char peer_names[512]; /* of the owner's certificate, when it failed verification */
	uint8_t in[2 + ONR_KX_MAX_FRAME];
};

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* deadline_of: the monotonic time at which timeout_ms ends (-1: never). */
static int64_t deadline_of(int timeout_ms)
{
	if (timeout_ms < 0)
		return -1;
	return mono_ms() + (timeout_ms == 0 ? ONR_KX_DEFAULT_TIMEOUT_MS : timeout_ms);
}

/* remaining is what poll(2) waits: -1 without a deadline, else the
 * milliseconds left (0 once past). */
static int remaining(int64_t deadline)
{
	int64_t left;
	if (deadline < 0)
		return -1;
	left = deadline - mono_ms();
	return left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
}

/* A BIO on the connected socket whose writes never raise SIGPIPE (send
 * with MSG_NOSIGNAL): an owner that hung up is an error, not a signal that
 * kills the application. Non-blocking: EAGAIN becomes a retry. */
static int bio_write(BIO *b, const char *data, int n)
{
	ssize_t w;
	BIO_clear_retry_flags(b);
	do
		w = send((int)BIO_get_fd(b, NULL), data, (size_t)n, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		BIO_set_retry_write(b);
	return (int)w;
}

static int bio_read(BIO *b, char *data, int n)
{
	ssize_t r;
	BIO_clear_retry_flags(b);
	do
		r = recv((int)BIO_get_fd(b, NULL), data, (size_t)n, 0);
	while (r < 0 && errno == EINTR);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		BIO_set_retry_read(b);
	return (int)r;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	switch (cmd) {
	case BIO_C_SET_FD:
		BIO_set_data(b, (void *)(intptr_t)*(int *)ptr);
		BIO_set_init(b, 1);
		(void)num;
		return 1;
	case BIO_C_GET_FD:
		if (ptr)
			*(int *)ptr = (int)(intptr_t)BIO_get_data(b);
		return (long)(intptr_t)BIO_get_data(b);
	case BIO_CTRL_FLUSH:
		return 1;
	}
	return 0;
}

static BIO_METHOD *bio_method;
static int kx_index = -1; /* an SSL's ex_data slot for its struct onerma_keyx */
static pthread_once_t kx_once = PTHREAD_ONCE_INIT;

static void kx_once_init(void)
{
	kx_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "onerma keyx");
	if (m && BIO_meth_set_write(m, bio_write) == 1 && BIO_meth_set_read(m, bio_read) == 1 &&
	    BIO_meth_set_ctrl(m, bio_ctrl) == 1)
		bio_method = m;
	else
		BIO_meth_free(m);
}

/* tls_detail is the last OpenSSL error's text (or the system's). */
static const char *tls_detail(char *buf, size_t n, int sys_errno)
{
	unsigned long e = ERR_peek_last_error();
	if (e != 0)
		ERR_error_string_n(e, buf, n);
	else if (sys_errno != 0)
		snprintf(buf, n, "%s", strerror(sys_errno));
	else
		snprintf(buf, n, "the connection ended");
	return buf;
}

/* remote_alert returns the TLS alert the owner sent, if that is the last
 * error, else -1. */
static int remote_alert(void)
{
	unsigned long e = ERR_peek_last_error();
	if (e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) >= SSL_AD_REASON_OFFSET &&
	    ERR_GET_REASON(e) < SSL_AD_REASON_OFFSET + 256)
		return ERR_GET_REASON(e) - SSL_AD_REASON_OFFSET;
	return -1;
}

enum io_op { IO_CONNECT, IO_READ, IO_WRITE };

/* tls_io runs one SSL call to completion on the non-blocking socket,
 * polling until deadline: the bytes moved (or 1 for the handshake), 0 at a
 * clean end of the stream, or a negative code with its detail recorded
 * (what: "handshake", "send request", "read reply"). */
static int tls_io(struct onerma_keyx *kx, enum io_op op, void *buf, int n, int64_t deadline, const char *what)
{
	for (;;) {
		int r, e, sys;
		struct pollfd pfd = {.fd = kx->fd};
		char detail[256];
		ERR_clear_error();
		errno = 0;
		r = op == IO_CONNECT ? SSL_connect(kx->ssl)
		    : op == IO_READ  ? SSL_read(kx->ssl, buf, n)
				     : SSL_write(kx->ssl, buf, n);
		if (r > 0)
			return r;
		sys = errno;
		e = SSL_get_error(kx->ssl, r);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			int ms = remaining(deadline), pr;
			if (ms == 0)
				return onr_fail(-ETIMEDOUT, "keyx: %s %s: timed out", what, kx->addr);
			pfd.events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
			do
				pr = poll(&pfd, 1, ms);
			while (pr < 0 && errno == EINTR);
			if (pr < 0)
				return onr_fail(-errno, "keyx: %s %s: poll: %s", what, kx->addr, strerror(errno));
			continue;
		}
		if (e == SSL_ERROR_ZERO_RETURN)
			return 0;
		if (e == SSL_ERROR_SYSCALL && sys == 0 && ERR_peek_last_error() == 0)
			return 0; /* the owner closed without close_notify */
		if (op == IO_CONNECT && SSL_get_verify_result(kx->ssl) != X509_V_OK)
			return -ONERMA_E_SERVER_CERT; /* the caller explains it */
		/* With TLS 1.3 the owner judges this client's certificate after
		 * the client's side of the handshake: an alert before its first
		 * reply is that verdict. An alert during the handshake is about
		 * something else (the version, the cipher suites). */
		int alert = remote_alert();
		if (alert >= 0 && op != IO_CONNECT && !kx->answered)
			return onr_fail(-ONERMA_E_CERT_REFUSED,
					"keyx: %s %s: the owner refused this client's certificate (it must be a client "
					"certificate from the owner's CA, not expired): remote error: tls: %s",
					what, kx->addr, SSL_alert_desc_string_long(alert));
		if (alert >= 0)
			return onr_fail(-ONERMA_E_TLS, "keyx: %s %s: remote error: tls: %s", what, kx->addr,
					SSL_alert_desc_string_long(alert));
		if (e == SSL_ERROR_SYSCALL && sys != 0)
			return onr_fail(-sys, "keyx: %s %s: %s", what, kx->addr, strerror(sys));
		return onr_fail(-ONERMA_E_TLS, "keyx: %s %s: %s", what, kx->addr, tls_detail(detail, sizeof detail, sys));
	}
}

/* san_list writes c's DNS names, then its IP addresses (as keyx lists
 * them), joined by ", ", into buf. */
static void san_list(X509 *c, char *buf, size_t n)
{
	GENERAL_NAMES *sans = X509_get_ext_d2i(c, NID_subject_alt_name, NULL, NULL);
	size_t len = 0;
	buf[0] = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); i++) {
			const GENERAL_NAME *gn = sk_GENERAL_NAME_value(sans, i);
			char one[INET6_ADDRSTRLEN + 1] = "";
			if (pass == 0 && gn->type == GEN_DNS) {
				snprintf(one, sizeof one, "%.*s", ASN1_STRING_length(gn->d.dNSName),
					 (const char *)ASN1_STRING_get0_data(gn->d.dNSName));
			} else if (pass == 1 && gn->type == GEN_IPADD) {
				int l = ASN1_STRING_length(gn->d.iPAddress);
				const unsigned char *d = ASN1_STRING_get0_data(gn->d.iPAddress);
				if (l == 4 || l == 16)
					inet_ntop(l == 4 ? AF_INET : AF_INET6, d, one, sizeof one);
			}
			if (one[0] && len < n) {
				int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", one);
				len += w > 0 ? (size_t)w : 0;
			}
		}
	GENERAL_NAMES_free(sans);
}

/* verify_cb keeps OpenSSL's verdict and notes the names of the owner's
 * certificate when it fails, for the message that says which it holds
 * (OpenSSL keeps no peer certificate from a failed handshake). */
static int verify_cb(int ok, X509_STORE_CTX *sc)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(sc, SSL_get_ex_data_X509_STORE_CTX_idx());
	struct onerma_keyx *kx = ssl ? SSL_get_ex_data(ssl, kx_index) : NULL;
	X509 *c = X509_STORE_CTX_get_current_cert(sc);
	if (!ok && kx && c && X509_STORE_CTX_get_error_depth(sc) == 0 && !kx->peer_names[0])
		san_list(c, kx->peer_names, sizeof kx->peer_names);
	return ok;
}

/* explain_server_cert records why the owner's certificate failed
 * verification, as keyx's explainServerCert says it. */
static int explain_server_cert(struct onerma_keyx *kx, const char *host)
{
	long v = SSL_get_verify_result(kx->ssl);
	const char *dial = kx->addr;
	switch (v) {
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
	case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
	case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
	case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
	case X509_V_ERR_CERT_SIGNATURE_FAILURE:
		return onr_fail(-ONERMA_E_SERVER_CERT,
				"keyx: dial %s: the server's certificate is not from the CA of these credentials (\"%s\"): "
				"the owner's and the readers' credentials must come from one CA (%s)",
				dial, kx->ca_name, X509_verify_cert_error_string(v));
	case X509_V_ERR_HOSTNAME_MISMATCH:
	case X509_V_ERR_IP_ADDRESS_MISMATCH:
		return onr_fail(-ONERMA_E_SERVER_CERT,
				"keyx: dial %s: the server's certificate does not name %s (it names %s): dial a name it "
				"holds, or issue the server's credentials for %s",
				dial, host, kx->peer_names[0] ? kx->peer_names : "nothing", host);
	case X509_V_ERR_CERT_HAS_EXPIRED:
	case X509_V_ERR_CERT_NOT_YET_VALID:
		return onr_fail(-ONERMA_E_SERVER_CERT,
				"keyx: dial %s: the server's certificate has expired or is not yet valid (check both "
				"clocks)",
				dial);
	case X509_V_ERR_INVALID_PURPOSE:
		return onr_fail(-ONERMA_E_SERVER_CERT, "keyx: dial %s: the server's certificate is not a server certificate",
				dial);
	}
	return onr_fail(-ONERMA_E_SERVER_CERT, "keyx: dial %s: the server's certificate: %s", dial,
			X509_verify_cert_error_string(v));
}

/* split_host_port is net.SplitHostPort for "host:port" and "[v6]:port". */
static int split_host_port(const char *addr, char *host, size_t hn, char *port, size_t pn)
{
	const char *colon;
	size_t hl;
	if (addr[0] == '[') {
		const char *close_ = strchr(addr, ']');
		if (!close_ || close_[1] != ':')
			return -1;
		hl = (size_t)(close_ - addr - 1);
		addr++;
		colon = close_ + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon || memchr(addr, ':', (size_t)(colon - addr)))
			return -1;
		hl = (size_t)(colon - addr);
	}
	if (hl == 0 || hl >= hn || strlen(colon + 1) == 0 || strlen(colon + 1) >= pn)
		return -1;
	memcpy(host, addr, hl);
	host[hl] = 0;
	snprintf(port, pn, "%s", colon + 1);
	for (const char *p = port; *p; p++)
		if (*p < '0' || *p > '9')
			return -1;
	return 0;
}

/* tcp_connect connects to host:port, trying each address, retrying while
 * every one refuses until deadline (the owner still starting): the
 * connected non-blocking socket, or a negative code. */
static int tcp_connect(const char *host, const char *port, const char *addr, int64_t deadline)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
	int gai = getaddrinfo(host, port, &hints, &res), last = ECONNREFUSED;
	if (gai != 0)
		return onr_fail(gai == EAI_SYSTEM ? -errno : -EHOSTUNREACH, "keyx: dial %s: %s", addr,
				gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
	for (;;) {
		for (ai = res; ai; ai = ai->ai_next) {
			int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
			struct pollfd pfd;
			int one = 1, soerr = 0, pr;
			socklen_t sl = sizeof soerr;
			if (fd < 0) {
				last = errno;
				continue;
			}
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
				freeaddrinfo(res);
				return fd;
			}
			if (errno != EINPROGRESS) {
				last = errno;
				close(fd);
				continue;
			}
			pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
			do
				pr = poll(&pfd, 1, remaining(deadline));
			while (pr < 0 && errno == EINTR);
			if (pr == 0) {
				close(fd);
				freeaddrinfo(res);
				return onr_fail(-ETIMEDOUT, "keyx: dial %s: connect: timed out", addr);
			}
			if (pr < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
				soerr = errno;
			if (soerr == 0) {
				freeaddrinfo(res);
				return fd;
			}
			last = soerr;
			close(fd);
		}
		/* Only a refusal is worth waiting out. */
		if (last != ECONNREFUSED || remaining(deadline) == 0) {
			freeaddrinfo(res);
			return onr_fail(-last, "keyx: dial %s: connect: %s", addr, strerror(last));
		}
		int ms = remaining(deadline);
		struct timespec ts = {0, 50 * 1000000L};
		if (ms >= 0 && ms < 50)
			ts.tv_nsec = (long)ms * 1000000L;
		nanosleep(&ts, NULL);
	}
}

static void kx_free(struct onerma_keyx *kx)
{
	if (!kx)
		return;
	SSL_free(kx->ssl);
	SSL_CTX_free(kx->ctx);
	if (kx->fd >= 0)
		close(kx->fd);
	OPENSSL_cleanse(kx->in, sizeof kx->in);
	free(kx);
}

int onerma_keyx_dial(const char *addr, const char *creds_dir, int timeout_ms, struct onerma_keyx **out)
{
	struct onerma_keyx *kx = NULL;
	struct onr_creds creds = {0};
	char path[4096], host[256], port[16], detail[256];
	unsigned char ipbuf[16];
	int64_t deadline = deadline_of(timeout_ms);
	int err, r;
	BIO *bio;

	if (!out)
		return onr_fail(-ONERMA_E_INVALID, "keyx: dial: out is NULL");
	*out = NULL;
	if (!addr || split_host_port(addr, host, sizeof host, port, sizeof port) != 0)
		return onr_fail(-ONERMA_E_INVALID, "keyx: dial \"%.200s\": want HOST:PORT", addr ? addr : "");
	if ((err = client_path(creds_dir, path, sizeof path)) != 0)
		return err;
	if ((err = onr_kx_load_creds(path, false, &creds)) != 0)
		return err;
	pthread_once(&kx_once, kx_once_init);
	if (!bio_method || kx_index < 0) {
		onr_kx_creds_free(&creds);
		return onr_fail(-ENOMEM, "keyx: dial: OpenSSL: no BIO method");
	}
	if (!(kx = calloc(1, sizeof *kx))) {
		onr_kx_creds_free(&creds);
		return onr_fail(-ENOMEM, "keyx: dial: out of memory");
	}
	kx->fd = -1;
	snprintf(kx->addr, sizeof kx->addr, "%s", addr);
	cn(creds.ca, kx->ca_name, sizeof kx->ca_name);

	/* TLS 1.3 only, this client's certificate offered, the owner's
	 * verified against the credentials' CA alone (keyx.ClientTLS). */
	ERR_clear_error();
	kx->ctx = SSL_CTX_new(TLS_client_method());
	if (!kx->ctx || SSL_CTX_set_min_proto_version(kx->ctx, TLS1_3_VERSION) != 1 ||
	    SSL_CTX_set_max_proto_version(kx->ctx, TLS1_3_VERSION) != 1 ||
	    SSL_CTX_use_certificate(kx->ctx, creds.leaf) != 1 || SSL_CTX_use_PrivateKey(kx->ctx, creds.key) != 1 ||
	    SSL_CTX_check_private_key(kx->ctx) != 1 || X509_STORE_add_cert(SSL_CTX_get_cert_store(kx->ctx), creds.ca) != 1) {
		err = onr_fail(-ONERMA_E_TLS, "keyx: dial %s: TLS setup: %s", addr, tls_detail(detail, sizeof detail, 0));
		goto fail;
	}
	SSL_CTX_set_verify(kx->ctx, SSL_VERIFY_PEER, verify_cb);
	onr_kx_creds_free(&creds); /* the context holds its own references */
	if (!(kx->ssl = SSL_new(kx->ctx))) {
		err = onr_fail(-ENOMEM, "keyx: dial %s: TLS setup: %s", addr, tls_detail(detail, sizeof detail, 0));
		goto fail;
	}
	/* The owner's certificate must have the server-auth usage and name
	 * host: an IP address among its IP addresses, else a DNS name (sent
	 * as SNI, as Go does for names). */
	SSL_set_ex_data(kx->ssl, kx_index, kx);
	X509_VERIFY_PARAM *vp = SSL_get0_param(kx->ssl);
	X509_VERIFY_PARAM_set_purpose(vp, X509_PURPOSE_SSL_SERVER);
	if (inet_pton(AF_INET, host, ipbuf) == 1 || inet_pton(AF_INET6, host, ipbuf) == 1)
		r = X509_VERIFY_PARAM_set1_ip_asc(vp, host);
	else
		r = SSL_set1_host(kx->ssl, host) == 1 && SSL_set_tlsext_host_name(kx->ssl, host) == 1;
	if (r != 1) {
		err = onr_fail(-ONERMA_E_INVALID, "keyx: dial %s: host %s cannot be verified", addr, host);
		goto fail;
	}
	if ((kx->fd = tcp_connect(host, port, addr, deadline)) < 0) {
		err = kx->fd;
		goto fail;
	}
	if (!(bio = BIO_new(bio_method))) {
		err = onr_fail(-ENOMEM, "keyx: dial %s: out of memory", addr);
		goto fail;
	}
	BIO_set_fd(bio, kx->fd, BIO_NOCLOSE);
	SSL_set_bio(kx->ssl, bio, bio);
	r = tls_io(kx, IO_CONNECT, NULL, 0, deadline, "handshake with");
	if (r == -ONERMA_E_SERVER_CERT) {
		err = explain_server_cert(kx, host);
		goto fail;
	}
	if (r == 0) {
		err = onr_fail(-ONERMA_E_KX_CLOSED, "keyx: dial %s: the owner closed the connection during the handshake",
			       addr);
		goto fail;
	}
	if (r < 0) {
		err = r;
		goto fail;
	}
	*out = kx;
	return 0;
fail:
	onr_kx_creds_free(&creds);
	kx_free(kx);
	return err;
}

/* read_full reads exactly n bytes into buf: n, 0 at a clean end before
 * the first byte, or a negative code. */
static int read_full(struct onerma_keyx *kx, uint8_t *buf, int n, int64_t deadline, bool *partial)
{
	int got = 0;
	*partial = false;
	while (got < n) {
		int r = tls_io(kx, IO_READ, buf + got, n - got, deadline, "read reply from");
		if (r < 0)
			return r;
		if (r == 0) {
			*partial = got > 0;
			return got;
		}
		got += r;
	}
	return got;
}

/* exchange sends one request and reads its reply frame's body into kx->in
 * (after the 2-byte length): the body's length, or a negative code. */
static int exchange(struct onerma_keyx *kx, const uint8_t req[ONR_KX_REQUEST_LEN], int64_t deadline)
{
	uint8_t frame[2 + ONR_KX_REQUEST_LEN];
	bool partial;
	int r, l;
	frame[0] = 0;
	frame[1] = ONR_KX_REQUEST_LEN;
	memcpy(frame + 2, req, ONR_KX_REQUEST_LEN);
	/* One write: one TLS record. */
	r = tls_io(kx, IO_WRITE, frame, sizeof frame, deadline, "send request to");
	if (r == 0)
		return onr_fail(-ONERMA_E_KX_CLOSED, "keyx: send request to %s: the owner closed the connection", kx->addr);
	if (r < 0) {
		/* An owner that refused this client's certificate may have
		 * hung up before the request went out: its alert, still to be
		 * read, says why. */
		if (!kx->answered && r != -ETIMEDOUT && r != -ONERMA_E_CERT_REFUSED) {
			char saved[512];
			uint8_t b[1];
			snprintf(saved, sizeof saved, "%s", onerma_errmsg());
			if (tls_io(kx, IO_READ, b, 1, mono_ms() + 100, "read reply from") == -ONERMA_E_CERT_REFUSED)
				return -ONERMA_E_CERT_REFUSED;
			onr_fail(r, "%s", saved);
		}
		return r;
	}
	r = read_full(kx, kx->in, 2, deadline, &partial);
	if (r < 0)
		return r;
	if (r == 0 && !partial)
		return onr_fail(-ONERMA_E_KX_CLOSED, "keyx: server closed the connection without a reply");
	if (r < 2)
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: read reply: truncated frame length (%d of 2 bytes)", r);
	l = kx->in[0] << 8 | kx->in[1];
	if (l > ONR_KX_MAX_FRAME)
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: read reply: message of %d bytes", l);
	r = read_full(kx, kx->in + 2, l, deadline, &partial);
	if (r < 0)
		return r;
	if (r < l)
		return onr_fail(-ONERMA_E_PROTOCOL, "keyx: read reply: truncated message: %d of %d bytes", r, l);
	kx->answered = true;
	return l;
}

int onerma_keyx_fetch(struct onerma_keyx *kx, uint32_t region, int op, uint32_t initiator_addr, uint32_t identity,
		      int timeout_ms, struct onerma_grant *out)
{
	uint8_t req[ONR_KX_REQUEST_LEN];
	int err, l;

	if (!out)
		return onr_fail(-ONERMA_E_INVALID, "keyx: fetch: out is NULL");
	memset(out, 0, sizeof *out);
	if (!kx)
		return onr_fail(-ONERMA_E_INVALID, "keyx: fetch: no connection");
	if (kx->dead)
		return onr_fail(-ONERMA_E_KX_CLOSED, "keyx: fetch on a failed connection: close it and dial again");
	if ((err = onr_kx_encode_request(req, region, op, initiator_addr, identity)) != 0)
		return err;
	l = exchange(kx, req, deadline_of(timeout_ms));
	if (l < 0) {
		kx->dead = true;
		OPENSSL_cleanse(kx->in, sizeof kx->in);
		return l;
	}
	err = onr_kx_parse_reply(kx->in + 2, (size_t)l, out);
	OPENSSL_cleanse(kx->in, sizeof kx->in);
	if (err != 0) {
		/* The owner hangs up after these; a malformed reply leaves the
		 * stream where nothing can be trusted. */
		if (err == -ONERMA_E_PROTOCOL || err == -ONERMA_E_KX_BAD_REQUEST || err == -ONERMA_E_KX_REVOKED ||
		    err == -ONERMA_E_KX_INTERNAL)
			kx->dead = true;
		return err;
	}
	if (out->region != region || out->op != (uint32_t)op) {
		kx->dead = true;
		err = onr_fail(-ONERMA_E_PROTOCOL, "keyx: grant for region %#x op %u, asked for region %#x op %d",
			       out->region, out->op, region, op);
		onerma_grant_zero(out);
		return err;
	}
	return 0;
}

int onerma_keyx_fetch_for(struct onerma_keyx *kx, const struct onerma_identity *id, uint32_t region, int op,
			  int timeout_ms, struct onerma_grant *out)
{
	if (!id) {
		if (out)
			memset(out, 0, sizeof *out);
		return onr_fail(-ONERMA_E_INVALID, "keyx: fetch: no identity");
	}
	return onerma_keyx_fetch(kx, region, op, id->addr, id->pid, timeout_ms, out);
}

void onerma_keyx_peer_name(const struct onerma_keyx *kx, char *buf, size_t n)
{
	X509 *peer;
	char name[256] = "";
	if (!buf || n == 0)
		return;
	buf[0] = 0;
	if (!kx || !kx->ssl || !(peer = SSL_get1_peer_certificate(kx->ssl)))
		return;
	cn(peer, name, sizeof name);
	X509_free(peer);
	snprintf(buf, n, "%s", name);
}

void onerma_keyx_close(struct onerma_keyx *kx)
{
	if (!kx)
		return;
	/* close_notify, best effort and without waiting for the owner's. */
	if (kx->ssl && !kx->dead && SSL_is_init_finished(kx->ssl)) {
		ERR_clear_error();
		SSL_shutdown(kx->ssl);
	}
	ERR_clear_error();
	kx_free(kx);
}
