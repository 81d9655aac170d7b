// C side of package mb (see mb.h and doc.go).
#include <stdlib.h>
#include <string.h>
#include "mb.h"

// One manager for the process, set up once by mb_init (the Go side calls it
// under a sync.Once) and only read afterwards. The direct GCM API keeps no
// state in it (each call gets a key and a context), so every thread can use
// it at once; errors go to a thread-local errno (imb_get_errno(NULL)).
static IMB_MGR *mgr;
static IMB_ARCH used_arch;
static aes_gcm_enc_dec_t gcm_enc, gcm_dec;
static aes_gcm_pre_t gcm_pre;
static aes_gcm_init_t gcm_init;
static aes_gcm_enc_dec_update_t gcm_enc_update;
static aes_gcm_enc_dec_finalize_t gcm_enc_finalize;
static const uint8_t zeros[MB_GATHER_GAP];

// mb_init sets up the manager for arch (0: the best the CPU has, else an
// IMB_ARCH value). It returns 0, -1 when memory is short, -2 for an unknown
// arch, -3 when the library's self-test failed, or an ipsec-mb error (for
// example IMB_ERR_MISSING_CPUFLAGS_INIT_MGR when the CPU lacks what arch
// needs).
int mb_init(int arch)
{
	IMB_MGR *m = alloc_mb_mgr(0);
	if (m == NULL)
		return -1;
	switch (arch) {
	case 0:
		init_mb_mgr_auto(m, &used_arch);
		break;
	case IMB_ARCH_SSE:
		init_mb_mgr_sse(m);
		break;
	case IMB_ARCH_AVX:
		init_mb_mgr_avx(m);
		break;
	case IMB_ARCH_AVX2:
		init_mb_mgr_avx2(m);
		break;
	case IMB_ARCH_AVX512:
		init_mb_mgr_avx512(m);
		break;
	default:
		free_mb_mgr(m);
		return -2;
	}
	int err = imb_get_errno(m);
	if (err == 0 && m->gcm128_enc == NULL)
		err = IMB_ERR_MISSING_CPUFLAGS_INIT_MGR;
	if (err != 0) {
		free_mb_mgr(m);
		return err;
	}
	if ((m->features & IMB_FEATURE_SELF_TEST) &&
	    !(m->features & IMB_FEATURE_SELF_TEST_PASS)) {
		free_mb_mgr(m);
		return -3;
	}
	if (arch != 0)
		used_arch = (IMB_ARCH)arch;
	if (used_arch == IMB_ARCH_NONE)
		used_arch = (IMB_ARCH)m->used_arch;
	gcm_enc = m->gcm128_enc;
	gcm_dec = m->gcm128_dec;
	gcm_pre = m->gcm128_pre;
	gcm_init = m->gcm128_init;
	gcm_enc_update = m->gcm128_enc_update;
	gcm_enc_finalize = m->gcm128_enc_finalize;
	mgr = m;
	return 0;
}

int mb_arch(void) { return (int)used_arch; }

uint64_t mb_features(void) { return mgr != NULL ? mgr->features : 0; }

const char *mb_strerror(int err) { return imb_get_strerror(err); }

// Expanded keys: struct gcm_key_data wants 64-byte alignment (the AVX-512
// code loads it with aligned moves).
static size_t key_size(void) { return (sizeof(struct gcm_key_data) + 63) & ~(size_t)63; }

struct gcm_key_data *mb_key_new(void)
{
	struct gcm_key_data *k = aligned_alloc(64, key_size());
	if (k != NULL)
		memset(k, 0, key_size());
	return k;
}

// mb_key_set expands the AES-128 key lo ‖ hi (its bytes in memory order,
// passed by value so that no Go pointer crosses) into k: round keys and
// GHASH powers. It returns 0 or an ipsec-mb error.
int mb_key_set(struct gcm_key_data *k, uint64_t lo, uint64_t hi)
{
	uint8_t key[16];
	memcpy(key, &lo, 8);
	memcpy(key + 8, &hi, 8);
	gcm_pre(key, k);
	int err = imb_get_errno(NULL);
	explicit_bzero(key, sizeof key);
	return err;
}

void mb_key_free(struct gcm_key_data *k)
{
	if (k == NULL)
		return;
	explicit_bzero(k, key_size());
	free(k);
}

mb_batch *mb_batch_new(uint32_t cap)
{
	size_t head = (sizeof(mb_batch) + 63) & ~(size_t)63;
	size_t jobs = ((size_t)cap * sizeof(mb_job) + 63) & ~(size_t)63;
	size_t aad = (size_t)cap * MB_AAD_SCRATCH;
	size_t ok = ((size_t)cap + 63) & ~(size_t)63;
	uint8_t *p = aligned_alloc(64, head + jobs + aad + ok);
	if (p == NULL)
		return NULL;
	memset(p, 0, head + jobs + aad + ok);
	mb_batch *b = (mb_batch *)p;
	b->jobs = (mb_job *)(p + head);
	b->aad = (uint8_t(*)[MB_AAD_SCRATCH])(p + head + jobs);
	b->ok = p + head + jobs + aad;
	b->cap = cap;
	return b;
}

void mb_batch_free(mb_batch *b)
{
	if (b == NULL)
		return;
	// The context held keystream and GHASH state of the last job.
	explicit_bzero(&b->ctx, sizeof b->ctx);
	free(b);
}

// tag_equal compares two tags in constant time: no branch and no early
// exit on the data.
static inline uint32_t tag_equal(const uint8_t *a, const uint8_t *b)
{
	uint64_t a0, a1, b0, b1;
	memcpy(&a0, a, 8);
	memcpy(&a1, a + 8, 8);
	memcpy(&b0, b, 8);
	memcpy(&b1, b + 8, 8);
	uint64_t d = (a0 ^ b0) | (a1 ^ b1);
	return (uint32_t)(((d | (0 - d)) >> 63) ^ 1);
}

// mb_run executes jobs[0:n] in order and writes each result to ok[i]. It
// returns how many did not succeed.
uint32_t mb_run(mb_batch *b, uint32_t n)
{
	uint32_t failed = 0;
	b->lib_err = 0;
	for (uint32_t i = 0; i < n; i++) {
		mb_job *j = &b->jobs[i];
		uint8_t res = MB_RESULT_AUTH;
		int err;
		switch (j->kind) {
		case MB_SEAL:
			gcm_enc(j->key, &b->ctx, j->dst, j->src, j->len, j->iv,
			        j->aad, j->aad_len, j->tag, MB_TAG);
			err = imb_get_errno(NULL);
			res = err == 0 ? MB_RESULT_OK : MB_RESULT_LIB;
			break;
		case MB_SEAL_GATHER:
			// The same message MB_SEAL would seal from one buffer
			// holding the parts end to end: the update calls carry
			// partial blocks over in the context.
			gcm_init(j->key, &b->ctx, j->iv, j->aad, j->aad_len);
			gcm_enc_update(j->key, &b->ctx, j->dst, j->head, j->head_len);
			if (j->gap != 0)
				gcm_enc_update(j->key, &b->ctx, j->dst + j->head_len, zeros, j->gap);
			gcm_enc_update(j->key, &b->ctx, j->dst + j->head_len + j->gap, j->src, j->len);
			gcm_enc_finalize(j->key, &b->ctx, j->tag, MB_TAG);
			err = imb_get_errno(NULL);
			res = err == 0 ? MB_RESULT_OK : MB_RESULT_LIB;
			break;
		case MB_OPEN:
		case MB_OPEN_COPY: {
			// got starts as the complement of want, so a call that
			// wrote nothing can never verify.
			uint8_t got[MB_TAG];
			for (int k = 0; k < MB_TAG; k++)
				got[k] = (uint8_t)~j->want[k];
			gcm_dec(j->key, &b->ctx, j->dst, j->src, j->len, j->iv,
			        j->aad, j->aad_len, got, MB_TAG);
			err = imb_get_errno(NULL);
			uint32_t good = tag_equal(got, j->want) & (uint32_t)(err == 0);
			if (good) {
				if (j->kind == MB_OPEN_COPY && j->len != 0)
					memmove(j->copy_to, j->dst, j->len);
				res = MB_RESULT_OK;
			} else {
				// OpenResponseDirect: dst never keeps unverified
				// plaintext. OpenResponse: the packet's copy is
				// cleared, dst (copy_to) is untouched.
				if (j->len != 0)
					memset(j->dst, 0, j->len);
				res = err == 0 ? MB_RESULT_AUTH : MB_RESULT_LIB;
			}
			break;
		}
		default: // MB_FAIL, or a corrupt descriptor
			err = 0;
			break;
		}
		if (err != 0)
			b->lib_err = err;
		b->ok[i] = res;
		failed += res != MB_RESULT_OK;
	}
	b->failed = failed;
	return failed;
}

void mb_run_queued(void *arg)
{
	mb_batch *b = arg;
	uint32_t n = b->queued;

	if (n == 0 || b->hook_ran != 0)
		return;
	mb_run(b, n);
	b->hook_ran = n;
	b->queued = 0;
}

void mb_call_hook(void (*fn)(void *), void *arg) { fn(arg); }
