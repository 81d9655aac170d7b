/* unit_keyx.h - the key exchange's unit tests (unit_keyx.c), run by unit.c. */
#ifndef ONERMA_UNIT_KEYX_H
#define ONERMA_UNIT_KEYX_H

void test_keyx_request(void);
void test_keyx_reply(void);
void test_keyx_creds(void);
void test_keyx_fetch(void);
void test_keyx_tls(void);
/* keyx_test_cleanup frees the certificates the tests made. */
void keyx_test_cleanup(void);

#endif
