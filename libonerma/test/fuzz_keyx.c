/*
 * fuzz_keyx.c - libFuzzer target for what libonerma reads in the key
 * exchange: an owner's reply body (onr_kx_parse_reply) and a credentials
 * bundle (onr_kx_parse_bundle).
 *
 * The first byte picks: even, a reply; odd, a bundle. Invariants: nothing
 * crashes or leaks (ASan, UBSan); a reply is either a grant, which
 * re-encodes to the input byte for byte, or refused with the grant zeroed
 * and an error that is the library's; a bundle is either accepted with a
 * CA, a certificate and a key, or refused with a reason and nothing held.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_reply(const uint8_t *data, size_t size)
{
	struct onerma_grant g;
	uint8_t back[ONR_KX_GRANT_LEN] = {0};
	int err = onr_kx_parse_reply(data, size, &g);
	if (err != 0) {
		static const struct onerma_grant zero;
		if (err <= -ONERMA_E_MAX || err > -ONERMA_E_BASE || memcmp(&g, &zero, sizeof g) != 0)
			abort();
		if (err != -ONERMA_E_PROTOCOL && (err < -ONERMA_E_KX_CODE || err > -ONERMA_E_KX_BAD_REQUEST))
			abort();
		return;
	}
	/* A grant round-trips (keyx's marshalGrant layout). */
	back[0] = ONR_KX_VERSION;
	for (int i = 0; i < 4; i++) {
		back[4 + i] = (uint8_t)(g.region >> (24 - 8 * i));
		back[12 + i] = (uint8_t)(g.owner_addr >> (24 - 8 * i));
	}
	back[8] = (uint8_t)g.op;
	for (int i = 0; i < 8; i++)
		back[16 + i] = (uint8_t)(g.size >> (56 - 8 * i));
	memcpy(back + 24, g.kd, ONERMA_KEY_SIZE);
	if (size != ONR_KX_GRANT_LEN || memcmp(back, data, size) != 0 || g.size == 0 || g.owner_addr == 0)
		abort();
}

static void fuzz_bundle(const uint8_t *data, size_t size)
{
	struct onr_creds c;
	char why[256];
	if (size > ONR_KX_MAX_BUNDLE)
		return; /* refused unread by the loader */
	int err = onr_kx_parse_bundle(data, size, &c, why, sizeof why);
	if (err == 0) {
		if (!c.ca || !c.leaf || !c.key)
			abort();
		onr_kx_creds_free(&c);
	} else if (c.ca || c.leaf || c.key || (err == -ONERMA_E_CREDS && why[0] == 0)) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1)
		fuzz_bundle(data + 1, size - 1);
	else
		fuzz_reply(data + 1, size - 1);
	return 0;
}
