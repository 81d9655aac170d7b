// hello.cpp - libonerma from C++: dial the engine, print what it stamps on
// this process's requests, take a slot and close.
//
//	onerma-cxx-hello [SOCKET]
#include <onerma.h>

#include <cstdio>

int main(int argc, char **argv)
{
	const char *sock = argc > 1 ? argv[1] : ONERMA_DEFAULT_SOCKET;
	onerma_portal *p = nullptr;
	int err = onerma_dial(sock, "cxx-hello", nullptr, &p);
	if (err != 0) {
		std::fprintf(stderr, "dial %s: %s (%s)\n", sock, onerma_strerror(err), onerma_errmsg());
		return 1;
	}
	onerma_identity id;
	onerma_portal_identity(p, &id);
	char addr[16];
	uint32_t slot = 0;
	err = onerma_alloc_slots(p, 1, &slot);
	std::printf("identity %s %u core %d slot %u %s\n", onerma_addr_format(id.addr, addr), id.pid,
		    onerma_portal_core(p), slot, onerma_strerror(err));
	onerma_close(p);
	return err == 0 ? 0 : 1;
}
