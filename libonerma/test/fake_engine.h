/*
 * fake_engine.h - a stand-in for rmad's control server and data path, for
 * the unit tests: it answers the control protocol on a unix socket (with
 * memfds and an eventfd, as engine/ctl does) and lets the test play the
 * engine core on the rings.
 */
#ifndef FAKE_ENGINE_H
#define FAKE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "internal.h"

struct fake_engine {
	char path[108];
	int lfd;  /* listening socket */
	int conn; /* the accepted connection (-1: none) */
	pthread_t thr;
	atomic_int stop;

	/* Behaviour. */
	uint32_t slot_base;
	const char *refuse_op;   /* answer this op with refuse_code */
	const char *refuse_code;
	const char *refuse_quota;
	int bad_magic;           /* write a wrong magic at attach */
	int no_summary;          /* refuse summary (bad_request), as an engine older than it does */
	uint32_t identity;

	/* State the test reads. */
	struct onr_layout layout;
	uint8_t *seg;
	size_t seg_map;
	int bell_fd;
	_Atomic uint64_t *sum;   /* the summary doorbell's words (summary), NULL: none passed */
	int sum_fd;
	uint32_t next_slot;
	uint32_t regions;
	uint64_t pending_size, pending_map; /* of the last create_region */
	uint8_t last_key[16];
	/* the last register_region's "layout", as sent (layout_len -1: none;
	 * -2: not an array of integers) */
	int last_layout_len;
	uint64_t last_layout[16];
	uint32_t last_perm;
	uint32_t mod_count, mod_period_us; /* the last moderate's */
	int requests;
	uint32_t cmd_next, cpl_next; /* the engine's ring positions */
};

/* fake_start listens on a fresh socket path and serves one connection at
 * a time until fake_stop. */
int fake_start(struct fake_engine *fe, const char *path);
void fake_stop(struct fake_engine *fe);
/* fake_kill closes the live connection as a dying engine's kernel does. */
void fake_kill(struct fake_engine *fe);
/* fake_take copies up to max commands the application published, each
 * decoded as abi.Command.Decode does (a LOOKUP in its own layout). */
int fake_take(struct fake_engine *fe, struct onr_command *out, int max);
/* fake_complete writes and publishes one completion and rings the doorbell
 * if the application armed it. */
void fake_complete(struct fake_engine *fe, const struct onerma_completion *c);
/* The raw index words, to corrupt. */
_Atomic uint32_t *fake_cmd_cons(struct fake_engine *fe);
_Atomic uint32_t *fake_cpl_prod(struct fake_engine *fe);

#endif
