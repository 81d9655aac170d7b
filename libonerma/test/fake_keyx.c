/*
 * fake_keyx.c - certificates and a fake key exchange owner for the unit
 * tests (fake_keyx.h).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "fake_keyx.h"

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509_EXTENSION *ext;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, issuer ? issuer : x, x, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	if (!ext)
		return -1;
	int ok = X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	return ok == 1 ? 0 : -1;
}

int fk_issue(struct fk_cert *out, const char *cn, enum fk_kind kind, const struct fk_cert *issuer, long nb_s,
	     long na_s, const char *names)
{
	X509 *x = X509_new();
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509_NAME *name = X509_NAME_new();
	unsigned char serial[16];
	BIGNUM *bn = NULL;
	int ok = 0;
	memset(out, 0, sizeof *out);
	if (!x || !key || !name || RAND_bytes(serial, sizeof serial) != 1)
		goto out;
	serial[0] &= 0x7f;
	serial[0] |= 0x01;
	bn = BN_bin2bn(serial, sizeof serial, NULL);
	if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) || X509_set_version(x, 2) != 1 ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), nb_s) || !X509_gmtime_adj(X509_getm_notAfter(x), na_s) ||
	    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"OneRMA keyx", -1, -1, 0) != 1 ||
	    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) != 1 ||
	    X509_set_subject_name(x, name) != 1 ||
	    X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer->cert) : name) != 1 ||
	    X509_set_pubkey(x, key) != 1)
		goto out;
	X509 *icert = issuer ? issuer->cert : NULL;
	if (kind == FK_CA) {
		if (add_ext(x, icert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
		    add_ext(x, icert, NID_key_usage, "critical,keyCertSign,cRLSign") ||
		    add_ext(x, icert, NID_subject_key_identifier, "hash"))
			goto out;
	} else {
		if (add_ext(x, icert, NID_key_usage, "critical,digitalSignature") ||
		    (issuer && add_ext(x, icert, NID_authority_key_identifier, "keyid")))
			goto out;
		if (kind == FK_SERVER && (add_ext(x, icert, NID_ext_key_usage, "serverAuth") ||
					  add_ext(x, icert, NID_subject_alt_name,
						  names ? names : "DNS:localhost,IP:127.0.0.1,IP:::1")))
			goto out;
		if (kind == FK_CLIENT && add_ext(x, icert, NID_ext_key_usage, "clientAuth"))
			goto out;
	}
	if (X509_sign(x, issuer ? issuer->key : key, EVP_sha256()) <= 0)
		goto out;
	out->cert = x;
	out->key = key;
	x = NULL;
	key = NULL;
	ok = 1;
out:
	BN_free(bn);
	X509_NAME_free(name);
	X509_free(x);
	EVP_PKEY_free(key);
	return ok ? 0 : -1;
}

void fk_free(struct fk_cert *c)
{
	X509_free(c->cert);
	EVP_PKEY_free(c->key);
	memset(c, 0, sizeof *c);
}

int fk_write_bundle(const char *path, const struct fk_cert *ca, const struct fk_cert *leaf, EVP_PKEY *key,
		    unsigned mode)
{
	BIO *b;
	int ok;
	unlink(path);
	b = BIO_new_file(path, "w");
	if (!b)
		return -1;
	ok = PEM_write_bio_X509(b, ca->cert) == 1 && PEM_write_bio_X509(b, leaf->cert) == 1 &&
	     PEM_write_bio_PrivateKey(b, key ? key : leaf->key, NULL, NULL, 0, NULL, NULL) == 1;
	BIO_free(b);
	return ok && chmod(path, mode) == 0 ? 0 : -1;
}

static void put_be32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

void fk_grant(struct fk_step *st, uint32_t region, uint8_t op, uint32_t owner, uint64_t size, const uint8_t kd[16])
{
	memset(st, 0, sizeof *st);
	st->action = FK_REPLY;
	st->body[0] = 1;
	put_be32(st->body + 4, region);
	st->body[8] = op;
	put_be32(st->body + 12, owner);
	put_be32(st->body + 16, (uint32_t)(size >> 32));
	put_be32(st->body + 20, (uint32_t)size);
	memcpy(st->body + 24, kd, 16);
	st->len = 40;
}

void fk_refusal(struct fk_step *st, uint8_t code, const char *msg)
{
	memset(st, 0, sizeof *st);
	st->action = FK_REPLY;
	st->body[0] = 1;
	st->body[1] = code;
	st->len = 4 + (int)strlen(msg);
	memcpy(st->body + 4, msg, strlen(msg));
}

static int read_n(SSL *ssl, uint8_t *b, int n)
{
	int got = 0;
	while (got < n) {
		int r = SSL_read(ssl, b + got, n - got);
		if (r <= 0)
			return -1;
		got += r;
	}
	return 0;
}

/* serve runs the script on one connection. */
static void serve(struct fk_server *s, SSL *ssl)
{
	for (;;) {
		uint8_t hdr[2], body[300], out[302];
		int l;
		if (read_n(ssl, hdr, 2) != 0)
			return;
		l = hdr[0] << 8 | hdr[1];
		if (l > (int)sizeof body || read_n(ssl, body, l) != 0)
			return;
		memcpy(s->req, body, (size_t)l < sizeof s->req ? (size_t)l : sizeof s->req);
		s->req_len = l;
		s->nreq++;
		int step = s->step++;
		if (step >= s->nscript || s->script[step].action == FK_CLOSE)
			return;
		if (s->script[step].action == FK_SILENT) {
			while (SSL_read(ssl, body, sizeof body) > 0)
				;
			return;
		}
		out[0] = (uint8_t)(s->script[step].len >> 8);
		out[1] = (uint8_t)s->script[step].len;
		memcpy(out + 2, s->script[step].body, (size_t)s->script[step].len);
		if (SSL_write(ssl, out, 2 + s->script[step].len) <= 0)
			return;
	}
}

static void *run(void *arg)
{
	struct fk_server *s = arg;
	sigset_t pipe;
	/* A write to a client that left must not kill the test. */
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, NULL);
	while (!s->stop) {
		struct pollfd pfd = {.fd = s->lfd, .events = POLLIN};
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		int fd = accept(s->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		struct timeval tv = {5, 0};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		SSL *ssl = SSL_new(s->ctx);
		SSL_set_fd(ssl, fd);
		if (SSL_accept(ssl) == 1) {
			serve(s, ssl);
			SSL_shutdown(ssl);
		} else {
			s->handshakes_failed++;
		}
		SSL_free(ssl);
		close(fd);
	}
	return NULL;
}

int fk_start(struct fk_server *s)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	s->stop = 0;
	s->nreq = s->req_len = s->handshakes_failed = s->step = 0;
	s->ctx = SSL_CTX_new(TLS_server_method());
	if (!s->ctx ||
	    SSL_CTX_set_min_proto_version(s->ctx, s->max_version ? TLS1_2_VERSION : TLS1_3_VERSION) != 1 ||
	    SSL_CTX_set_max_proto_version(s->ctx, s->max_version ? s->max_version : TLS1_3_VERSION) != 1 ||
	    SSL_CTX_use_certificate(s->ctx, s->cert->cert) != 1 || SSL_CTX_use_PrivateKey(s->ctx, s->cert->key) != 1 ||
	    X509_STORE_add_cert(SSL_CTX_get_cert_store(s->ctx), s->trust->cert) != 1)
		return -1;
	SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(s->lfd, 8) != 0 ||
	    getsockname(s->lfd, (struct sockaddr *)&sa, &sl) != 0)
		return -1;
	s->port = ntohs(sa.sin_port);
	return pthread_create(&s->th, NULL, run, s) == 0 ? 0 : -1;
}

void fk_stop(struct fk_server *s)
{
	s->stop = 1;
	pthread_join(s->th, NULL);
	close(s->lfd);
	SSL_CTX_free(s->ctx);
	s->ctx = NULL;
}
