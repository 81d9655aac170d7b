/*
 * keys.c - key derivation (Go: aesni.DeriveKey), random region keys, and
 * IPv4 addresses in host order.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/evp.h>

#include "internal.h"

/* The derivation block is one AES block that K_r encrypts into K_d:
 *
 *	0  initiator IPv4 address, network byte order (4 B)
 *	4  initiator identity, big-endian u32 (the OneRMA header's PID)
 *	8  op type u8 (1 READ, 2 WRITE, 3 REKEY)
 *	9  zero (7 B)
 */
int onerma_derive_kd(const uint8_t kr[ONERMA_KEY_SIZE], uint32_t initiator_addr, uint32_t identity, unsigned op,
		     uint8_t kd[ONERMA_KEY_SIZE])
{
	uint8_t block[16] = {0};
	EVP_CIPHER_CTX *ctx;
	int outl = 0, ok;

	if (!kr || !kd || op > 255)
		return -ONERMA_E_INVALID;
	block[0] = (uint8_t)(initiator_addr >> 24);
	block[1] = (uint8_t)(initiator_addr >> 16);
	block[2] = (uint8_t)(initiator_addr >> 8);
	block[3] = (uint8_t)initiator_addr;
	block[4] = (uint8_t)(identity >> 24);
	block[5] = (uint8_t)(identity >> 16);
	block[6] = (uint8_t)(identity >> 8);
	block[7] = (uint8_t)identity;
	block[8] = (uint8_t)op;
	ctx = EVP_CIPHER_CTX_new();
	if (!ctx)
		return -ENOMEM;
	/* One block of AES-128 without padding: ECB of one block is the raw
	 * block cipher. */
	ok = EVP_EncryptInit_ex(ctx, EVP_aes_128_ecb(), NULL, kr, NULL) == 1 && EVP_CIPHER_CTX_set_padding(ctx, 0) == 1 &&
	     EVP_EncryptUpdate(ctx, kd, &outl, block, sizeof block) == 1 && outl == ONERMA_KEY_SIZE;
	EVP_CIPHER_CTX_free(ctx);
	if (!ok) {
		memset(kd, 0, ONERMA_KEY_SIZE);
		return -ONERMA_E_INVALID;
	}
	return 0;
}

bool onr_key_zero(const uint8_t k[ONERMA_KEY_SIZE])
{
	uint8_t acc = 0;
	for (int i = 0; i < ONERMA_KEY_SIZE; i++)
		acc |= k[i];
	return acc == 0;
}

/* onr_random_key draws a K_r from the kernel's random source, never all
 * zero (the engine refuses that key). */
int onr_random_key(uint8_t k[ONERMA_KEY_SIZE])
{
	do {
		size_t got = 0;
		while (got < ONERMA_KEY_SIZE) {
			ssize_t n = getrandom(k + got, ONERMA_KEY_SIZE - got, 0);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return onr_fail(-errno, "getrandom: %s", strerror(errno));
			}
			got += (size_t)n;
		}
	} while (onr_key_zero(k));
	return 0;
}

int onerma_addr_parse(const char *s, uint32_t *addr)
{
	uint32_t a = 0;
	int parts = 0;
	if (!s || !addr)
		return -ONERMA_E_INVALID;
	/* Four decimal numbers 0..255, no leading zeros, nothing else
	 * (netip.ParseAddr's rules for IPv4). */
	while (parts < 4) {
		unsigned v = 0;
		int digits = 0;
		if (*s < '0' || *s > '9')
			return -ONERMA_E_INVALID;
		if (*s == '0' && s[1] >= '0' && s[1] <= '9')
			return -ONERMA_E_INVALID;
		while (*s >= '0' && *s <= '9' && digits < 4) {
			v = v * 10 + (unsigned)(*s++ - '0');
			digits++;
		}
		if (v > 255 || digits > 3)
			return -ONERMA_E_INVALID;
		a = a << 8 | v;
		if (++parts < 4 && *s++ != '.')
			return -ONERMA_E_INVALID;
	}
	if (*s != 0)
		return -ONERMA_E_INVALID;
	*addr = a;
	return 0;
}

char *onerma_addr_format(uint32_t a, char *buf)
{
	snprintf(buf, 16, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
	return buf;
}
