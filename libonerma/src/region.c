/*
 * region.c - registering, rekeying and deregistering regions (Go:
 * portal/region.go). A region's memory is created by the engine as a
 * sealed memfd (create_region), mapped and faulted in here, then
 * registered (register_region), after which the engine seals it against
 * new writable mappings: the mapping must exist before.
 */
#include <errno.h>
#include <stdio.h>
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

/* layout_error is abi.BucketLayout.Validate's verdict: NULL, or the
 * rule l breaks, written into msg. */
static const char *layout_error(const struct onerma_bucket_layout *l, char *msg, size_t n)
{
	const struct {
		const char *name;
		uint32_t off, width;
	} f[3] = {{"tag", l->tag_off, l->tag_width},
		  {"pointer", l->ptr_off, l->ptr_width},
		  {"length", l->len_off, l->len_width}};
	if (l->bucket_bytes < 1 || l->bucket_bytes > ONERMA_MAX_OP_BYTES) {
		snprintf(msg, n, "bucket size not in 1..%d: %u", ONERMA_MAX_OP_BYTES, l->bucket_bytes);
		return msg;
	}
	if (l->entry_bytes < 1 || l->entry_bytes > l->bucket_bytes) {
		snprintf(msg, n, "entry stride not in 1..bucket size: stride %u, bucket %u", l->entry_bytes, l->bucket_bytes);
		return msg;
	}
	if (onerma_lookup_target_offset(l->entry_bytes) >= ONERMA_MAX_OP_BYTES) {
		snprintf(msg, n, "the entry leaves no room for a target: stride %u", l->entry_bytes);
		return msg;
	}
	if (l->ptr_shift > ONERMA_MAX_PTR_SHIFT) {
		snprintf(msg, n, "pointer shift above %d: %u", ONERMA_MAX_PTR_SHIFT, l->ptr_shift);
		return msg;
	}
	for (int i = 0; i < 3; i++) {
		if (f[i].width != 1 && f[i].width != 2 && f[i].width != 4 && f[i].width != 8) {
			snprintf(msg, n, "field width not 1, 2, 4 or 8: %s width %u", f[i].name, f[i].width);
			return msg;
		}
		if (f[i].off > l->entry_bytes || l->entry_bytes - f[i].off < f[i].width) {
			snprintf(msg, n, "field outside the entry: %s at %u, %u bytes, entry %u bytes", f[i].name, f[i].off,
				 f[i].width, l->entry_bytes);
			return msg;
		}
	}
	return NULL;
}

uint32_t onerma_lookup_target_offset(uint32_t entry_bytes) { return (entry_bytes + 63) & ~(uint32_t)63; }

int onerma_bucket_layout_check(const struct onerma_bucket_layout *layout)
{
	char msg[160];
	if (!layout)
		return onr_fail(-ONERMA_E_INVALID, "bucket layout: NULL");
	if (layout_error(layout, msg, sizeof msg))
		return onr_fail(-ONERMA_E_INVALID, "bucket layout: %s", msg);
	return 0;
}

/* register_region creates, maps and registers a region (lay NULL: no
 * bucket layout); perm and lay are checked by the caller. */
static int register_region(struct onerma_portal *p, uint64_t size, unsigned perm,
			   const struct onerma_bucket_layout *lay, const uint8_t kr[ONERMA_KEY_SIZE],
			   struct onerma_region **out)
{
	struct onr_request req = {.op = ONR_OP_CREATE_REGION, .size = size};
	struct onr_reply mr, rr;
	struct onerma_region *r;
	uint8_t *mapping = NULL;
	int fd, err;

	if (onr_key_zero(kr))
		return onr_fail(-ONERMA_E_ZERO_KEY, "register_region: the region key is all zero");
	if (size < 1 || size > ONERMA_MAX_REGION_BYTES)
		return onr_fail(-ONERMA_E_INVALID, "register_region: size %llu, want 1..%llu", (unsigned long long)size,
				(unsigned long long)ONERMA_MAX_REGION_BYTES);
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
	if (lay)
		req.layout = *lay;
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
	if (lay)
		r->layout = *lay;
	pthread_mutex_init(&r->kmu, NULL);
	memcpy(r->kr, kr, ONERMA_KEY_SIZE);
	r->next = p->regions;
	p->regions = r;
	*out = r;
	return 0;
}

int onerma_register_region_key(struct onerma_portal *p, uint64_t size, unsigned perm, const uint8_t kr[ONERMA_KEY_SIZE],
			       struct onerma_region **out)
{
	if (!p || !out || !kr)
		return onr_fail(-ONERMA_E_INVALID, "register_region: NULL argument");
	*out = NULL;
	if (perm == 0 || (perm & ~(unsigned)ONERMA_PERM_ALL) != 0)
		return onr_fail(-ONERMA_E_INVALID,
				"register_region: perm %#x, want a non-zero subset of %#x "
				"(ONERMA_PERM_REMOTE_LOOKUP: onerma_register_lookup_region)",
				perm, ONERMA_PERM_ALL);
	return register_region(p, size, perm, NULL, kr, out);
}

int onerma_register_lookup_region_key(struct onerma_portal *p, uint64_t size, unsigned perm,
				      const struct onerma_bucket_layout *layout, const uint8_t kr[ONERMA_KEY_SIZE],
				      struct onerma_region **out)
{
	const struct onerma_region *q;
	char msg[160];
	if (!p || !out || !kr || !layout)
		return onr_fail(-ONERMA_E_INVALID, "register_region: NULL argument");
	*out = NULL;
	if (!(perm & ONERMA_PERM_REMOTE_LOOKUP) || (perm & ~(unsigned)ONERMA_PERM_ANY) != 0)
		return onr_fail(-ONERMA_E_INVALID, "register_region: perm %#x, want ONERMA_PERM_REMOTE_LOOKUP and a subset of %#x",
				perm, ONERMA_PERM_ANY);
	if (layout_error(layout, msg, sizeof msg))
		return onr_fail(-ONERMA_E_INVALID, "register_region: bucket layout: %s", msg);
	if (size > ONERMA_MAX_LOOKUP_REGION_BYTES || size < layout->bucket_bytes)
		return onr_fail(-ONERMA_E_INVALID, "register_region: size %llu, want %u..%llu for buckets of %u bytes",
				(unsigned long long)size, layout->bucket_bytes, (unsigned long long)ONERMA_MAX_LOOKUP_REGION_BYTES,
				layout->bucket_bytes);
	if (layout->linked != 0) {
		for (q = p->regions; q && q->id != layout->linked; q = q->next)
			;
		if (!q)
			return onr_fail(-ONERMA_E_INVALID, "register_region: linked region %#x is not a region of this portal",
					layout->linked);
	}
	return register_region(p, size, perm, layout, kr, out);
}

int onerma_register_lookup_region(struct onerma_portal *p, uint64_t size, unsigned perm,
				  const struct onerma_bucket_layout *layout, struct onerma_region **out)
{
	uint8_t kr[ONERMA_KEY_SIZE];
	int err = onr_random_key(kr);
	if (err == 0)
		err = onerma_register_lookup_region_key(p, size, perm, layout, kr, out);
	explicit_bzero(kr, sizeof kr);
	return err;
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

int onerma_region_layout(const struct onerma_region *r, struct onerma_bucket_layout *out)
{
	*out = r->layout;
	return r->layout.bucket_bytes != 0;
}

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
