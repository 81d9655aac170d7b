/* hello.c - a portal on the engine, a region it owns, the K_d its owner
 * derives for a reader (here itself), one READ through the engine.
 * Usage: onerma-c-hello [SOCKET]. docs/c.md shows this file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <onerma.h>

static void check(int err, const char *what)
{
	if (err < 0) {
		fprintf(stderr, "%s: %s (%s)\n", what, onerma_strerror(err), onerma_errmsg());
		exit(1);
	}
}

int main(int argc, char **argv)
{
	struct onerma_portal *p;
	struct onerma_region *r, *sink;
	struct onerma_identity id;
	struct onerma_completion c;
	struct onerma_op op = {0};
	uint32_t slot;

	check(onerma_dial(argc > 1 ? argv[1] : ONERMA_DEFAULT_SOCKET, "c-hello", NULL, &p), "dial");
	check(onerma_alloc_slots(p, 1, &slot), "alloc_slots"); /* one op in flight at a time */
	/* The owner's side: a region remote READs may read, under a random K_r. */
	check(onerma_register_region(p, 4096, ONERMA_PERM_REMOTE_READ, &r), "register_region");
	strcpy(onerma_region_addr(r), "hello from C");
	/* K_d for this process's READs; an owner hands it over a channel it trusts. */
	onerma_portal_identity(p, &id);
	check(onerma_region_derive_kd(r, id.addr, id.pid, ONERMA_OP_READ, op.key), "derive_kd");
	/* The reader's side: a sink where the engine lands READ data, one READ. */
	check(onerma_register_region(p, 4096, ONERMA_PERM_LOCAL_WRITE, &sink), "register_region");
	op.type = ONERMA_OP_READ;
	op.slot = slot;
	op.cookie = 1;
	op.remote_addr = id.addr; /* the owner's engine: this one */
	op.remote_region = onerma_region_id(r);
	op.local = sink;
	op.length = 64;
	check(onerma_submit(p, &op), "submit");
	check(onerma_wait(p, &c, 1, 10000), "wait"); /* every op posted gets exactly one completion */
	printf("%s %u ns \"%s\"\n", onerma_status_str(c.status), c.total_delay_ns, (char *)onerma_region_addr(sink));
	onerma_close(p);
	return c.status == ONERMA_STATUS_OK ? 0 : 1;
}
