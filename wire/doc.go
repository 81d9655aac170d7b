// Package wire holds OneRMA's on-the-wire formats: Ethernet II, IPv4 (no
// options, never fragmented), UDP, the 48-byte OneRMA header, the 16-byte
// trailer, ARP for IPv4 over Ethernet, and the two ICMP messages an engine
// handles (icmp.go: echo, answered so that ping works, and "fragmentation
// needed", RFC 1191, reported about the engine's own frames). Like RoCEv2, OneRMA rides on UDP
// so it crosses L3 networks and works on any DPDK port or kernel interface.
//
// It is a leaf package shared by the engine core, the simulator and tests.
// Decoding is allocation-free and never panics on any input: every length is
// checked before it is used, and every error is a preallocated sentinel.
//
// Frame layout:
//
//	| Ethernet 14 | IPv4 20 | UDP 8 | OneRMA header 48 | payload 0..MTU-92 | trailer 16 |
//
// OneRMA header (big-endian):
//
//	0  version u8 | type u8 | status u8 | flags u8 (requests: FlagHigh, the initiator's class)
//	4  initiator PID u32   (stamped by the initiating engine)
//	8  tag u64             (initiator's slot id << 32 | slot sequence)
//	16 region u32          (request: remote region id; pull, write data: the server's pull handle)
//	20 length u32          (request, pull: op length; response, write data: payload length)
//	24 offset u64          (request: offset in the region; response, write data: offset in
//	                        the op; pull: the server's timeout in ns)
//	32 iv [12]byte         (AES-GCM nonce: sender IPv4 address ‖ sender counter)
//	44 aux u32             (lookup request: the bucket's offset; lookup response: the
//	                        answer's length; 0 in every other type)
//
// Types: 1 read request, 2 read response (data), 3 NACK, 4 error (status),
// 5 rekey request, 6 acknowledgment, and the WRITE's request to read
// (paper §5.1): 7 write request, 8 pull (the serving engine asks for the
// data: a WRITE's bytes, or a REKEY's new key), 9 write data; and the
// LOOKUP's two hops: 10 lookup request (offset: the tag to match; aux:
// the bucket's offset; flags: FlagBucket), 11 lookup response (data, like
// a READ's, of an answer of aux bytes: the matched entry at 0, its target
// from the next multiple of 64; status REMOTE_NOT_FOUND when the answer
// is the bucket).
//
// A READ's data comes back in responses of at most an MTU each, every one
// carrying its offset within the op; offsets are multiples of 64, so the
// initiator tracks arrival with a 64-bit bitmap per op (one bit per 64 B),
// whatever the responder's MTU, and drops duplicates and overlaps. UDP
// ports name the core that must process a frame (port.go).
//
// Every message is sealed with AES-128-GCM (package aesni): the additional
// authenticated data is the IPv4 addresses, the UDP header and the OneRMA
// header (AAD: frame[26:90], one contiguous run), a response's payload is
// ciphertext, and the trailer is the 16-byte GCM tag. The IPv4 header
// checksum is written but not needed on receive: the tag covers every IPv4
// field the engine uses. The TOS byte carries the DSCP of the op's class of
// service (Fields.DSCP; ECN 0); it is not authenticated, since a fabric may
// remark it, and the receiver decides nothing by it.
//
// IPv4 below OneRMA (DecodeIPv4, for any protocol): no options
// (ErrIPOptions), no fragments (ErrFragment), TTL above 0 (ErrTTLZero);
// frames the engine sends carry TTL 64, DF and ID 0. ICMP (DecodeICMP)
// is checked whole: its checksum covers the message, and a
// fragmentation-needed message must quote the IPv4 header and the first
// 8 bytes (the UDP ports) of the datagram it concerns.
package wire
