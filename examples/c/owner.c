/*
 * owner.c - a region's owner in C: it registers a region that remote
 * engines may READ and WRITE, fills it with a pattern, and hands each
 * reader the derived keys K_d for that reader's identity. Here the keys
 * go to stdout; a real owner hands them over a channel it authenticates
 * (TLS with client certificates, as package keyx does for Go).
 *
 *	onerma-c-owner [-socket PATH] [-size BYTES]
 *
 * It prints "region ADDR ID SIZE", then reads commands on stdin, one a line:
 *
 *	kd ADDR IDENTITY   -> kd READ_KD WRITE_KD REKEY_KD (hex) for that reader
 *	rekey              -> rekeyed (a fresh random K_r: every K_d given stops working)
 *	dump OFFSET LENGTH -> dump HEX (the region's bytes, as remote WRITEs left them)
 *
 * At the end of its input it deregisters the region and closes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <onerma.h>

static void hexout(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static int die(const char *what, int err)
{
	fprintf(stderr, "onerma-c-owner: %s: %s (%s)\n", what, onerma_strerror(err), onerma_errmsg());
	return 1;
}

int main(int argc, char **argv)
{
	const char *sock = ONERMA_DEFAULT_SOCKET;
	uint64_t size = 64 << 10;
	struct onerma_portal *p;
	struct onerma_region *r;
	struct onerma_identity id;
	char line[256], addr[16];
	int err;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "-socket") == 0)
			sock = argv[i + 1];
		else if (strcmp(argv[i], "-size") == 0)
			size = strtoull(argv[i + 1], NULL, 10);
		else {
			fprintf(stderr, "usage: onerma-c-owner [-socket PATH] [-size BYTES]\n");
			return 2;
		}
	}
	if ((err = onerma_dial(sock, "c-owner", NULL, &p)) != 0)
		return die("dial", err);
	/* A random K_r; remote READs and WRITEs and remote REKEYs allowed. */
	err = onerma_register_region(p, size,
				     ONERMA_PERM_REMOTE_READ | ONERMA_PERM_REMOTE_WRITE | ONERMA_PERM_LOCAL_READ |
					     ONERMA_PERM_LOCAL_WRITE,
				     &r);
	if (err != 0)
		return die("register_region", err);
	uint8_t *mem = onerma_region_addr(r);
	for (uint64_t i = 0; i < size; i++)
		mem[i] = (uint8_t)(i * 167 + (i >> 9) + 3);
	onerma_portal_identity(p, &id);
	printf("region %s %u %llu\n", onerma_addr_format(id.addr, addr), onerma_region_id(r), (unsigned long long)size);
	fflush(stdout);

	while (fgets(line, sizeof line, stdin)) {
		char who[32];
		unsigned pid;
		unsigned long long off, len;
		if (sscanf(line, "kd %31s %u", who, &pid) == 2) {
			uint32_t a;
			uint8_t kd[ONERMA_KEY_SIZE];
			if (onerma_addr_parse(who, &a) != 0) {
				printf("error bad address\n");
			} else {
				printf("kd");
				for (unsigned op = ONERMA_OP_READ; op <= ONERMA_OP_REKEY; op++) {
					onerma_region_derive_kd(r, a, pid, op, kd);
					printf(" ");
					hexout(kd, sizeof kd);
				}
				printf("\n");
			}
		} else if (strncmp(line, "rekey", 5) == 0) {
			uint8_t kr[ONERMA_KEY_SIZE];
			if (getrandom(kr, sizeof kr, 0) != (ssize_t)sizeof kr)
				return die("getrandom", 0);
			kr[0] |= 1; /* never all zero */
			err = onerma_rekey(p, r, kr);
			printf(err ? "error %s\n" : "rekeyed\n", onerma_strerror(err));
		} else if (sscanf(line, "dump %llu %llu", &off, &len) == 2 && off <= size && len <= size - off) {
			printf("dump ");
			hexout(mem + off, len);
			printf("\n");
		} else {
			printf("error unknown command\n");
		}
		fflush(stdout);
	}
	if ((err = onerma_deregister_region(p, r)) != 0)
		return die("deregister_region", err);
	onerma_close(p);
	return 0;
}
