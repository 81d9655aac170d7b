/*
 * check.h - the unit tests' checks: a failed one prints where and what and
 * counts against the running test (unit.c's runner resets the count per
 * test).
 */
#ifndef ONERMA_TEST_CHECK_H
#define ONERMA_TEST_CHECK_H

#include <stdio.h>

#include "onerma.h"

extern int failures; /* in the running test */

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "    %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);                   \
			failures++;                                                                                    \
		}                                                                                                      \
	} while (0)
#define CHECK_EQ(got, want)                                                                                            \
	do {                                                                                                           \
		long long g_ = (long long)(got), w_ = (long long)(want);                                               \
		if (g_ != w_) {                                                                                        \
			fprintf(stderr, "    %s:%d: %s = %lld, want %lld (%s)\n", __FILE__, __LINE__, #got, g_, w_,   \
				onerma_errmsg());                                                                      \
			failures++;                                                                                    \
		}                                                                                                      \
	} while (0)
/* CHECK_MSG: onerma_errmsg() holds want. */
#define CHECK_MSG(want)                                                                                                \
	do {                                                                                                           \
		if (!strstr(onerma_errmsg(), (want))) {                                                                \
			fprintf(stderr, "    %s:%d: errmsg %s\n      lacks %s\n", __FILE__, __LINE__, onerma_errmsg(), \
				(want));                                                                               \
			failures++;                                                                                    \
		}                                                                                                      \
	} while (0)

#endif
