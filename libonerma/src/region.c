/*
 * region.c - registering, rekeying and deregistering regions (Go:
 * portal/region.go). A region's memory is created by the engine as a
 * sealed memfd (create_region), mapped and faulted in here, then
 * registered (register_region), after which the engine seals it against
 * new writable mappings: the mapping must exist before.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

static int deregister_id(struct onerma_portal *p, uint32_t id)
{
	struct onr_request req = {.op = ONR_OP_DEREGISTER_REGION, .region = id};
	struct onr_reply r;
	int fd, err = onr_round_trip(p, &req, &r, &fd);
	if (fd >= 0)
		close(fd);
	return err;
}

int onerma_register_region_key(struct onerma_portal *p, uint64_t size, unsigned perm, const uint8_t kr[ONERMA_KEY_SIZE],
			       struct onerma_region **out)
{
	struct onr_request req = {.op = ONR_OP_CREATE_REGION, .size = size};
	struct onr_reply mr, rr;
	struct onerma_region *r;
	uint8_t *mapping = NULL;
	int fd, err;

	if (!p || !out || !kr)
		return onr_fail(-ONERMA_E_INVALID, "register_region: NULL argument");
	*out = NULL;
	if (onr_key_zero(kr))
		return onr_fail(-ONERMA_E_ZERO_KEY, "register_region: the region key is all zero");
	if (size < 1 || size > ONERMA_MAX_REGION_BYTES)
		return onr_fail(-ONERMA_E_INVALID, "register_region: size %llu, want 1..%llu", (unsigned long long)size,
				(unsigned long long)ONERMA_MAX_REGION_BYTES);
	if (perm == 0 || (perm & ~(unsigned)ONERMA_PERM_ALL) != 0)
		return onr_fail(-ONERMA_E_INVALID, "register_region: perm %#x, want a non-zero subset of %#x", perm,
				ONERMA_PERM_ALL);
	if ((err = onr_round_trip(p, &req, &mr, &fd)) != 0)
		return err;
	if (fd < 0 || mr.size != size) {
		if (fd >= 0)
			close(fd);
		return onr_fail(-ONERMA_E_PROTOCOL, "create_region: malformed reply (memory %u of %llu bytes, fd %d)",
				mr.memory, (unsigned long long)mr.size, fd);
	}
	/* Mapped and faulted in here first: the engine seals the memory when
	 * it registers it, after which no new writable mapping is possible. */
	if ((err = onr_map_fd(fd, mr.map_size, &mapping)) != 0)
		return err;
	req = (struct onr_request){.op = ONR_OP_REGISTER_REGION, .memory = mr.memory, .perm = perm};
	memcpy(req.key, kr, ONERMA_KEY_SIZE);
	err = onr_round_trip(p, &req, &rr, &fd);
	explicit_bzero(req.key, sizeof req.key);
	if (fd >= 0)
		close(fd);
	if (err == 0 && (rr.size != size || rr.map_size != mr.map_size)) {
		/* The engine registered something else: give it back rather
		 * than leak it. */
		deregister_id(p, rr.region);
		err = onr_fail(-ONERMA_E_PROTOCOL, "register_region: the reply names %llu bytes (map %llu), asked %llu",
			       (unsigned long long)rr.size, (unsigned long long)rr.map_size, (unsigned long long)size);
	}
	if (err != 0) {
		munmap(mapping, (size_t)mr.map_size);
		return err;
	}
	r = calloc(1, sizeof *r);
	if (!r) {
		deregister_id(p, rr.region);
		munmap(mapping, (size_t)mr.map_size);
		return onr_fail(-ENOMEM, "register_region: out of memory");
	}
	r->p = p;
	r->id = rr.region;
	r->mapping = mapping;
	r->map_size = mr.map_size;
	r->size = size;
	r->perm = perm;
	r->hugetlb = rr.hugetlb;
	pthread_mutex_init(&r->kmu, NULL);
	memcpy(r->kr, kr, ONERMA_KEY_SIZE);
	r->next = p->regions;
	p->regions = r;
	*out = r;
	return 0;
}

int onerma_register_region(struct onerma_portal *p, uint64_t size, unsigned perm, struct onerma_region **out)
{
	uint8_t kr[ONERMA_KEY_SIZE];
	int err = onr_random_key(kr);
	if (err == 0)
		err = onerma_register_region_key(p, size, perm, kr, out);
	explicit_bzero(kr, sizeof kr);
	return err;
}

int onerma_rekey(struct onerma_portal *p, struct onerma_region *r, const uint8_t kr[ONERMA_KEY_SIZE])
{
	struct onr_request req = {.op = ONR_OP_REKEY};
	struct onr_reply rep;
	int fd, err;
	if (!p || !r || r->p != p || !r->mapping)
		return onr_fail(-ONERMA_E_REGION, "rekey: not a region of this portal");
	if (!kr || onr_key_zero(kr))
		return onr_fail(-ONERMA_E_ZERO_KEY, "rekey: the region key is all zero");
	req.region = r->id;
	memcpy(req.key, kr, ONERMA_KEY_SIZE);
	err = onr_round_trip(p, &req, &rep, &fd);
	explicit_bzero(req.key, sizeof req.key);
	if (fd >= 0)
		close(fd);
	if (err != 0)
		return err;
	pthread_mutex_lock(&r->kmu);
	memcpy(r->kr, kr, ONERMA_KEY_SIZE);
	pthread_mutex_unlock(&r->kmu);
	return 0;
}

int onerma_deregister_region(struct onerma_portal *p, struct onerma_region *r)
{
	struct onerma_region **pp;
	int err;
	if (!p || !r || r->p != p || !r->mapping)
		return onr_fail(-ONERMA_E_REGION, "deregister_region: not a region of this portal");
	if ((err = deregister_id(p, r->id)) != 0)
		return err;
	for (pp = &p->regions; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	munmap(r->mapping, (size_t)r->map_size);
	explicit_bzero(r->kr, sizeof r->kr);
	pthread_mutex_destroy(&r->kmu);
	free(r);
	return 0;
}

uint32_t onerma_region_id(const struct onerma_region *r) { return r->id; }
void *onerma_region_addr(const struct onerma_region *r) { return r->mapping; }
uint64_t onerma_region_size(const struct onerma_region *r) { return r->size; }
unsigned onerma_region_perm(const struct onerma_region *r) { return r->perm; }
int onerma_region_hugetlb(const struct onerma_region *r) { return r->hugetlb; }

void onerma_region_key(struct onerma_region *r, uint8_t kr[ONERMA_KEY_SIZE])
{
	pthread_mutex_lock(&r->kmu);
	memcpy(kr, r->kr, ONERMA_KEY_SIZE);
	pthread_mutex_unlock(&r->kmu);
}

int onerma_region_derive_kd(struct onerma_region *r, uint32_t initiator_addr, uint32_t identity, unsigned op,
			    uint8_t kd[ONERMA_KEY_SIZE])
{
	uint8_t kr[ONERMA_KEY_SIZE];
	int err;
	onerma_region_key(r, kr);
	err = onerma_derive_kd(kr, initiator_addr, identity, op, kd);
	explicit_bzero(kr, sizeof kr);
	return err;
}
