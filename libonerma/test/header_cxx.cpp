// header_cxx.cpp - onerma.h compiles as C++ (make check-cxx builds it with
// -pedantic under several standards): extern "C", no designated
// initialisers, no C-only keywords in the public types.
#include <onerma.h>

#include <cstring>

static_assert(sizeof(onerma_completion) == 32, "a completion is 32 bytes, as in the ring");

int main()
{
	onerma_options opt = onerma_options();
	opt.service_class = ONERMA_CLASS_HIGH;
	onerma_op op = onerma_op();
	op.type = ONERMA_OP_READ;
	op.length = ONERMA_MAX_OP_BYTES;
	onerma_completion c = onerma_completion();
	c.status = ONERMA_STATUS_ENGINE_GONE;
	onerma_identity id = onerma_identity(); // the type's name is not hidden by a function's
	id.pid = 1;
	unsigned char kd[ONERMA_KEY_SIZE];
	std::memset(kd, 0, sizeof kd);
	int (*dial)(const char *, const char *, const onerma_options *, onerma_portal **) = onerma_dial;
	int (*poll)(onerma_portal *, onerma_completion *, int) = onerma_poll;
	int (*kx_dial)(const char *, const char *, int, onerma_keyx **) = onerma_keyx_dial;
	int (*kx_fetch)(onerma_keyx *, uint32_t, int, uint32_t, uint32_t, int, onerma_grant *) = onerma_keyx_fetch;
	onerma_grant g = onerma_grant();
	g.op = ONERMA_OP_READ;
	onerma_op_set_grant(&op, &g);
	(void)dial;
	(void)poll;
	(void)kx_dial;
	(void)kx_fetch;
	return static_cast<int>(id.pid) + opt.service_class + static_cast<int>(op.length) + c.status + kd[0] - ONERMA_E_BASE > 0 ? 0 : 1;
}
