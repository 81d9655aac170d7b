// C side of package mb: the ipsec-mb manager, key expansion and the batch
// loop. Everything here is called from mb.go; nothing keeps a Go pointer
// beyond what the Go side pinned (see Batch in mb.go).
#ifndef ONERMA_AESNI_MB_H
#define ONERMA_AESNI_MB_H

#include <stdint.h>
#include <stddef.h>
#include <intel-ipsec-mb.h>

// Sizes mirrored by the Go side (aesni.NonceSize, aesni.TagSize,
// aesni.MaxAADSize + aesni.NonceSize rounded up to 16).
#define MB_NONCE 12
#define MB_TAG 16
#define MB_AAD_SCRATCH 144

// Job kinds.
enum {
	MB_SEAL = 1,      // encrypt src into dst (len bytes), tag to tag
	MB_OPEN = 2,      // decrypt src into dst, verify; zero dst on failure
	MB_OPEN_COPY = 3, // MB_OPEN in place (dst == src), then copy dst to copy_to
	MB_FAIL = 4,      // rejected at Add (a length off the wire): fails
	// MB_SEAL_GATHER: MB_SEAL of head (head_len bytes) ‖ gap zero bytes ‖
	// src (len bytes) into dst (head_len + gap + len bytes): one message
	// from two places, each byte read once by the cipher.
	MB_SEAL_GATHER = 5,
};

// Per-job result in mb_batch.ok.
enum {
	MB_RESULT_AUTH = 0, // an open whose tag did not match, or MB_FAIL
	MB_RESULT_OK = 1,
	MB_RESULT_LIB = 2, // ipsec-mb rejected the parameters (a bug here)
};

// The most zero bytes MB_SEAL_GATHER puts between its two parts.
#define MB_GATHER_GAP 64

// One queued operation (112 bytes). Pointers are C memory, mmap'd memory or
// Go memory pinned by the Go side until mb_run returns.
typedef struct mb_job {
	const struct gcm_key_data *key;
	uint8_t *dst;       // output of the cipher (never NULL)
	const uint8_t *src; // input of the cipher (never NULL)
	uint64_t len;       // bytes of plaintext / ciphertext
	const uint8_t *aad; // additional data (scratch or the caller's)
	uint64_t aad_len;
	uint8_t *tag;     // MB_SEAL: where the tag goes
	uint8_t *copy_to; // MB_OPEN_COPY: where the plaintext goes once verified
	uint8_t iv[MB_NONCE];
	uint32_t kind;
	uint8_t want[MB_TAG]; // opens: the received tag
	const uint8_t *head;  // MB_SEAL_GATHER: the first part
	uint32_t head_len;
	uint32_t gap; // MB_SEAL_GATHER: zeros after the head (< MB_GATHER_GAP)
} mb_job;

// A batch: one C allocation, 64-byte aligned, laid out as
// mb_batch | jobs[cap] | aad[cap][MB_AAD_SCRATCH] | ok[cap].
typedef struct mb_batch {
	struct gcm_context_data ctx; // reused by every job of the batch
	uint8_t dummy[64];           // a valid address for empty buffers
	mb_job *jobs;
	uint8_t (*aad)[MB_AAD_SCRATCH];
	uint8_t *ok;
	uint32_t cap;
	int32_t lib_err; // last ipsec-mb error of the last run, 0 if none
	// The hook (mb_run_queued): Go keeps queued equal to the jobs queued;
	// the hook runs them and says so in hook_ran (Go reads and zeroes it).
	uint32_t queued;
	uint32_t hook_ran;
	uint32_t failed; // the jobs of the last mb_run that failed (mb_run's result)
} mb_batch;

int mb_init(int arch);
int mb_arch(void);
uint64_t mb_features(void);
const char *mb_strerror(int err);

struct gcm_key_data *mb_key_new(void);
int mb_key_set(struct gcm_key_data *k, uint64_t lo, uint64_t hi);
void mb_key_free(struct gcm_key_data *k);

mb_batch *mb_batch_new(uint32_t cap);
void mb_batch_free(mb_batch *b);
uint32_t mb_run(mb_batch *b, uint32_t n);
// mb_run_queued runs every job queued in the batch at arg (a mb_batch *),
// if any, and records how many in hook_ran: a hook another C library calls
// inside its own crossing (a port's pre-transmit hook).
void mb_run_queued(void *arg);
// mb_call_hook calls fn(arg) (tests: Go cannot call a C function pointer).
void mb_call_hook(void (*fn)(void *), void *arg);

#endif
