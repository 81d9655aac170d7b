// Package aesni seals and opens OneRMA protocol messages with AES-128-GCM:
// derived keys, IVs that never repeat, the AAD rules that tie a response to
// its request, the well-known reserved key, and a per-core cache of
// prepared AEADs. It implements paper §4.2 ("1RMA Security"), the key
// rotation side of §5.2 (Rekey: Cache.Invalidate) and Appendix A
// ("Initialization Vectors for AES-GCM").
//
// # Place in the import graph
//
// A leaf: it imports only the standard library (crypto/aes, crypto/cipher,
// encoding/binary, hash/crc32, os, sync, syscall and friends), nothing of
// ours; the engine imports it. Where it needs a wire constant
// (ChunkAlign) it mirrors it and says so.
//
// # Keys (paper §4.2)
//
// A region key K_r (128 bits) never travels in RMA packets. Each initiating
// process gets a derived key K_d, one AES-128 block encryption under K_r:
//
//	K_d = AES-128-Encrypt(key K_r, block)
//
//	block (16 bytes):
//	 0  initiator IPv4 address, network byte order   4 B
//	 4  initiator PID, big-endian u32                4 B   (stamped by the initiating engine)
//	 8  op type u8                                   1 B   (the request's OneRMA message type)
//	 9  zero                                         7 B
//
// DeriveKey is the one-shot form; a Deriver keeps K_r expanded (one AES
// block per derivation). Requests, and every answer to a request
// (responses, NACK, errors), use the K_d of the request's op type.
//
// # Nonces (Appendix A)
//
// Every nonce is 12 bytes, carried in the OneRMA header's IV field
// (header offset 32):
//
//	nonce = sender IPv4 address (4 B) ‖ sender counter (u64, big-endian)
//
// The counter is per engine, drawn by each core from its IVLane of the
// engine's IVSource. It never repeats: not across cores (lanes take
// disjoint ranges), not across restarts or crashes (the state file holds a
// high-water mark written and fsynced before any counter below it is used;
// a new process starts at the mark), and it never wraps (ErrIVExhausted).
// Counter 0 is never used. Since the counter alone is unique, the nonce is
// unique for every key, including the reserved key that all engines share
// (their addresses differ).
//
//   - Request: initiator address ‖ IVLane.Next().
//   - Response chunk: the server salts with its own counter and the chunk's
//     offset. Per request it answers, the server takes a range
//     base = IVLane.NextN(ResponseSpan(opLen)) (one counter per 64-byte
//     chunk offset: 64 for a 4 KB op); the chunk at byte offset o within
//     the op has nonce server address ‖ (base + o/64) (PutResponseNonce).
//     Each chunk is sealed once: a re-send takes a new range.
//   - Answer without payload (NACK, error, REMOTE_AUTHENTICATION_FAILURE):
//     server address ‖ IVLane.Next().
//
// # Additional authenticated data
//
// The AAD of every message is the contiguous run of the frame that the
// CRC-32C placeholder covers today: IPv4 source and destination addresses,
// UDP header, OneRMA header (nonce included):
//
//	aad = frame[26:90]   (IPv4 addrs 8 ‖ UDP 8 ‖ OneRMA header 48 = 64 B)
//
// Responses and every other answer curry the request's IV (paper
// Appendix A): the additional data is
//
//	aad ‖ reqIV          (reqIV: the 12-byte IV field of the request answered,
//	                      which the initiator keeps in the op's slot)
//
// so an answer authenticates only against the outstanding request it
// answers: a replayed or misdirected response fails. A replayed READ
// request is served again, but under a fresh server counter, so it yields
// fresh ciphertext that only K_d opens (§4.2). 4-hop ops (writes, Rekey,
// §5.1-5.2) chain the same rule: the server's step-2 request carries its
// own counter (its entropy), step 3 curries that IV, step 4 curries step
// 3's, so a replayed step-1 request cannot make old step-3/4 messages
// verify.
//
// # Messages
//
//	request (READ):   trailer = GMAC: GCM tag of an empty plaintext      SealRequest / OpenRequest
//	                  with aad, nonce from the header
//	response chunk:   payload = GCM ciphertext, trailer = tag,           SealResponse / OpenResponse
//	                  additional data aad ‖ reqIV
//	NACK, error:      trailer = tag of an empty plaintext,               SealResponse(trailer, nil, …)
//	                  additional data aad ‖ reqIV, under K_d
//	auth failure:     same, under the reserved key                        SealAuthFailure / OpenAuthFailure
//
// A request that fails authentication (or names a region the server has no
// K_r for) is answered with REMOTE_AUTHENTICATION_FAILURE sealed with the
// well-known reserved key (ReservedKeyText); an initiator opens answers
// carrying that status with its reserved AEAD, everything else with K_d.
// Responses that fail authentication are dropped and counted. Every open
// returns the single opaque ErrAuth.
//
// # Hot path
//
// Nothing allocates or locks after setup (AllocsPerRun tests): a per-core
// Cache maps (region, peer, PID, op) to a prepared AEAD, so no key is
// expanded per message (building one costs several small seals:
// BenchmarkNewAEAD against BenchmarkSealResponse);
// AEAD methods write into caller buffers shaped like the frame: the
// ciphertext goes straight from the region into the payload (one pass,
// fused with the cipher), the tag into the trailer. OpenResponse verifies
// before it writes the region: it decrypts in place inside the packet and
// copies to the region only after the tag matched, so a forged response
// never writes region memory (cost: one copy of the payload,
// BenchmarkOpenResponse against BenchmarkOpenResponseDirect).
// OpenResponseDirect decrypts straight into the region in one pass and
// zeroes it on failure (crypto/cipher's behaviour): use it only where the
// destination is private until the op completes.
//
// # Why Go's crypto/cipher
//
// Go's AES-GCM on amd64 is AES-NI + PCLMULQDQ assembly (8 blocks
// interleaved, no VAES). On a CPU with VAES and VPCLMULQDQ, intel-ipsec-mb
// takes a VAES/AVX-512 path and is several times faster, the more so the
// larger the message; on a CPU without VAES the two are at parity beyond
// small messages. The numbers
// (per message size, per backend, per host) are in bench/RESULTS.md, "Go
// benchmarks of the pieces"; this package's are measured with
//
//	go test -run '^$' -bench . ./aesni
//
// This package stays crypto/cipher, a pure-Go leaf: race detector,
// fuzzing, the simulator and cross-builds work, no C memory rules; it is
// constant-time and maintained. The engine's fast path is the batched
// intel-ipsec-mb backend in aesni/mb (engine Config.Crypto "ipsec-mb",
// rmad's default): byte-identical output, a burst's seals and a received
// burst's opens each in one cgo call (one crossing costs a sizeable part
// of ipsec-mb's whole 64 B seal, so a call per message would eat the
// gain; `go test ./dpdk -run '^$' -bench CgoNoop` measures a crossing). Its mb.Key rides on the cached AEAD (AEAD.Ext) and is released
// through Cache.SetOnRemove. The gain is large only on VAES hosts
// (aesni/mb/doc.go). The simulator and most tests keep this package's
// AEADs (Crypto "go").
//
// # Ownership and concurrency
//
// IVSource is safe for concurrent use (lanes take ranges by
// compare-and-swap, never under a lock; a durable source reserves blocks
// ahead on its own goroutine, under a mutex); everything else (AEAD,
// Cache, Deriver, IVLane) belongs to one engine core and is not. Every
// method states which buffers it reads and writes; lengths the caller
// controls are asserted (a bug panics), lengths from the wire fail with
// ErrAuth.
package aesni
