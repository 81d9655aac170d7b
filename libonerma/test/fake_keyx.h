/*
 * fake_keyx.h - what the key exchange's unit tests stand on: certificates
 * made here with OpenSSL (a CA, server and client certificates of any
 * validity, usage and names, as keyx's CA issues them) written as the
 * bundles `rmactl creds` writes, and a fake owner: a TLS 1.3 server on
 * loopback, in a thread, that requires a client certificate from the CA
 * it is given and answers each request frame with the next entry of a
 * script that runs on across its connections.
 */
#ifndef ONERMA_FAKE_KEYX_H
#define ONERMA_FAKE_KEYX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

/* A certificate and its private key. */
struct fk_cert {
	X509 *cert;
	EVP_PKEY *key;
};

enum fk_kind {
	FK_CA,     /* basic constraints CA, certificate and CRL signing */
	FK_SERVER, /* extended key usage server-auth, names localhost, 127.0.0.1, ::1 */
	FK_CLIENT, /* extended key usage client-auth */
	FK_NO_EKU, /* a leaf with no extended key usage */
};

/* fk_issue makes a fresh P-256 key and a certificate named cn of kind,
 * valid from now+nb_s to now+na_s seconds, signed by issuer (self-signed
 * when issuer is NULL). names, for FK_SERVER, replaces the default
 * subject alternative names ("DNS:localhost,IP:127.0.0.1,IP:::1"). */
int fk_issue(struct fk_cert *out, const char *cn, enum fk_kind kind, const struct fk_cert *issuer, long nb_s,
	     long na_s, const char *names);
void fk_free(struct fk_cert *c);

/* fk_write_bundle writes path as keyx's bundle: ca's certificate, leaf's
 * certificate, key's private key (PKCS #8; key NULL: leaf's), with mode. */
int fk_write_bundle(const char *path, const struct fk_cert *ca, const struct fk_cert *leaf, EVP_PKEY *key,
		    unsigned mode);

/* What the fake owner does with one request. */
enum fk_action {
	FK_REPLY,  /* send body[0..len) as one frame */
	FK_CLOSE,  /* close the connection without a reply */
	FK_SILENT, /* send nothing; wait for the client to go */
};

struct fk_step {
	enum fk_action action;
	uint8_t body[300];
	int len;
};

struct fk_server {
	/* Set before fk_start. */
	const struct fk_cert *cert; /* the server's certificate */
	const struct fk_cert *trust; /* the CA it requires of clients */
	int max_version;             /* 0: TLS 1.3; TLS1_2_VERSION: an owner of no TLS 1.3 */
	struct fk_step script[8];
	int nscript;
	/* Read after fk_stop. */
	uint16_t port;
	uint8_t req[64]; /* the last request body */
	int req_len, nreq, handshakes_failed;
	/* Private. */
	int step; /* the script's next entry, across connections */
	int lfd;
	SSL_CTX *ctx;
	pthread_t th;
	volatile int stop;
};

int fk_start(struct fk_server *s);
void fk_stop(struct fk_server *s);

/* fk_grant and fk_refusal fill a step's reply body as keyx's Server does. */
void fk_grant(struct fk_step *st, uint32_t region, uint8_t op, uint32_t owner, uint64_t size, const uint8_t kd[16]);
void fk_refusal(struct fk_step *st, uint8_t code, const char *msg);

#endif
