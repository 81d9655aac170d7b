// SPDX-License-Identifier: (MIT OR GPL-2.0)
// rmad's XDP program for an AF_XDP port (DPDK's net_af_xdp, given to it
// as the xdp_prog devarg): it steers the frames addressed to the engine's
// IPv4 address to the AF_XDP socket of their rx queue and passes every
// other frame to the kernel, so the engine and the host's own network
// stack share one interface (one MAC address, two IPv4 addresses):
//
//   ARP whose target address is the engine's              -> the engine
//   IPv4 UDP or ICMP whose destination is the engine's    -> the engine
//   everything else (the kernel's address, other EtherTypes, other IP
//   protocols, VLAN-tagged and short frames)               -> the kernel
//
// DPDK 22.11 loads this object with libbpf, attaches its first program to
// the interface and puts each queue's socket into the map named xsks_map
// (rx queue index -> socket); rmad then writes the engine's address into
// onerma_cfg (../xdp.go: Filter.SetAddr). Until it does, and whenever the
// address is 0, every frame goes to the kernel. A frame for the engine on
// a queue without a socket goes to the kernel too (bpf_redirect_map's
// fallback), which drops it (not its address), and is counted apart.
//
// Built by `make bpf` (clang -target bpf); the object is committed next to
// this file (steer.bpf.o) and embedded by ../xdp.go.
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

// Sockets by rx queue index, filled by DPDK (the name is its contract).
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

// The engine's address and who set it (xdp.go: cfgValue).
struct steer_cfg {
	__be32 ip4;     // network byte order; 0: steer nothing
	__u32 owner_pid; // the rmad process that set it (stale-program check)
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_cfg);
} onerma_cfg SEC(".maps");

// Counters (xdp.go: Stats), per CPU.
enum { C_ENGINE = 0, C_NO_SOCKET = 1, C_KERNEL = 2, NCOUNTERS = 3 };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NCOUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} onerma_stats SEC(".maps");

// An ARP packet for IPv4 over Ethernet (RFC 826), byte-aligned: the
// target address sits at frame offset 38. (<linux/if_arp.h> would pull in
// the C library's headers.)
#define ARPHRD_ETHER 1
struct arp_ipv4 {
	__be16 hrd, pro;
	__u8 hln, pln;
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
} __attribute__((packed));

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&onerma_stats, &c);
	if (v)
		*v += 1; // per CPU: XDP runs with migration disabled
}

static __always_inline int pass(void)
{
	count(C_KERNEL);
	return XDP_PASS;
}

static __always_inline int to_engine(struct xdp_md *ctx)
{
	long r = bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
	count(r == XDP_REDIRECT ? C_ENGINE : C_NO_SOCKET);
	return (int)r;
}

SEC("xdp")
int onerma_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 key = 0;
	struct steer_cfg *cfg = bpf_map_lookup_elem(&onerma_cfg, &key);
	if (!cfg || cfg->ip4 == 0)
		return pass();
	__be32 engine = cfg->ip4;

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return pass();
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->version != 4 || ip->daddr != engine)
			return pass();
		if (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_ICMP)
			return pass();
		return to_engine(ctx);
	}
	if (eth->h_proto == bpf_htons(ETH_P_ARP)) {
		struct arp_ipv4 *arp = (void *)(eth + 1);
		if ((void *)(arp + 1) > end)
			return pass();
		if (arp->hrd != bpf_htons(ARPHRD_ETHER) || arp->pro != bpf_htons(ETH_P_IP) ||
		    arp->hln != ETH_ALEN || arp->pln != 4)
			return pass();
		__be32 tpa;
		__builtin_memcpy(&tpa, arp->tpa, 4);
		if (tpa != engine)
			return pass();
		return to_engine(ctx);
	}
	return pass();
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
