// Package kv is a sharded, replicated in-memory cache whose clients read
// with one-sided READs: the key/value caching service of the 1RMA paper
// (§7.1, Figures 8 and 9), designed after Pilaf (self-verifying data
// structures read with RDMA), FaRM (versions checked by the reader) and
// CliqueMap (set-associative index, clients' access hints driving
// eviction, replicas and fast failover).
//
// # Roles
//
// A Server owns one shard: two regions it registers with its engine
// (package portal) — an index of fixed-size buckets and a slab of value
// records — plus the key exchange (package keyx) that hands each client
// the K_d of both regions, and an RPC over mutually authenticated TLS 1.3
// (keyx credentials: keyx.Credentials.ServerTLS, ClientTLS) for SET,
// DELETE, access hints and DESCRIBE. A GET never involves the server's
// application: the client LOOKUPs the key's hash in its bucket (one round
// trip: the slot and the record it points to, or the bucket when no slot
// has the hash), or READs the key's bucket and, when the value is not in
// the bucket, READs the record the bucket points to; the server's engine
// serves them.
//
// Clients are named by their certificates (keyx.Permit, in
// ServerConfig.Permits): a client granted keyx.Read gets the K_d of both
// regions for its engine's address (its certificate's, or one the permit
// adds), DESCRIBE and STATS; only one granted keyx.Write may also SET,
// DELETE and send access hints. A read-only client's SET or DELETE is
// refused (ErrNotGranted, the refusal naming the certificate and what it
// is granted) and its hints dropped; a client the permits do not name is
// refused everything, and one whose certificate the CA revoked (the
// server's credentials' revocation list, keyx.LoadServer) is refused at
// its next request and disconnected (ErrRevoked).
//
// A Client places keys on servers by consistent hashing (a ring of 160
// points per server, named by RPC address) with R replicas each, reads
// from the first replica that is up, and writes to all of them.
//
// # Regions
//
//	index region: Buckets × Ways slots of 64 B (one READ per bucket: Ways × 64 ≤ 4 KB)
//	  bucket b = KeyHash(key) & (Buckets-1), at b × Ways × 64
//
//	slot (64 B, little endian)
//	   0  seq u32      even: stable version; odd: being rewritten; 0: never written
//	   4  kind u8      0 empty, 1 inline, 2 pointer
//	   5  key len u8
//	   6  value len u16 (inline)
//	   8  body 48 B    inline: key ‖ value (key + value ≤ 48 B)
//	                   pointer: key hash u64 ‖ stamp u64 ‖ offset/64 u32 ‖ record length u32
//	  56  sum u64      XXH64 of bytes 0..55
//
//	slab region: 1 MB pages, each given to one size class (64 B, ×1.25, ... to the largest record)
//	record (at a 64-byte aligned offset, any length up to the largest value)
//	   0  stamp u64    unique per record the server writes; the slot names it
//	   8  value len u32
//	  12  key len u8, kind u8 (3), zero u16
//	  16  key ‖ value
//	   …  sum u64      XXH64 of everything before it
//
// # LOOKUPs
//
// The server registers its index with its bucket layout (IndexLayout: a
// slot's tag is its key hash, its pointer offset/64 into the slab, its
// length the record's) and PermRemoteLookup, and its key exchange grants
// the LOOKUP K_d wherever it grants Read. A client that got that K_d GETs
// with one LOOKUP (abi.OpLookup) of the key's hash in its bucket, asking
// for the bucket on a miss, of up to 4 KB: OK brings the slot at 0 and its
// record at 64; REMOTE_NOT_FOUND the bucket (an inline value is found
// there, or no key). The slot and the record are checked as a READ's are
// (below), and the answer's length must be the slot's record's: the
// engine scanned the slot at one moment and sent it at another, so a slot
// and record from either side of a SET fail a check and are read again
// (ClientStats.Retries; a slot torn under the scan may also point nowhere:
// REMOTE_LOOKUP_BOUNDS, read again). A record too large for one LOOKUP
// (REMOTE_LOOKUP_TOO_LARGE), a slot of another key with the hash, and a
// refusal (BAD_COMMAND from an engine without the op: never again on
// this client; REMOTE_PERMISSION) go on with the READs
// (ClientStats.LookupReads). A server on an engine that refuses the
// layout, or with ServerConfig.NoLookup, registers its index for READs
// and grants no LOOKUP K_d; its clients READ (ClientConfig.NoLookup reads
// too). A key whose every value the client reads fits in its slot (key
// length + ClientConfig.MaxValue ≤ MaxInline) is read with the bucket's
// READ: its LOOKUP could only bring the bucket back, after a scan.
//
// # Reads and writes that race
//
// The server updates a slot in place under a sequence lock: it makes the
// sequence odd, writes the kind, lengths and body, writes the sum computed
// over the new header (with the next even sequence) and body, then stores
// that even sequence. A client validates every slot it uses from its own
// copy (the READ's sink): an odd sequence, or a sum that does not match
// (bytes of two versions), means the READ overlapped a write, and the
// client reads again (ClientStats.Retries). A record is never changed
// while a slot points to it: a SET writes the new record into a free
// extent, then publishes the slot, then frees the old extent. A reader
// that followed an old pointer into an extent since reused finds another
// stamp or key (ErrStale), or a record being written (ErrUnstable), and
// reads the bucket again. A torn value is never returned: it would have
// to carry the sum of other bytes (2^-64).
//
// What a client decodes is treated as untrusted: lengths are checked
// against the slot and the record, a pointer against the slab's size
// (DecodeSlot, DecodeRecord; fuzzed by FuzzDecode), so a corrupt or
// malicious server can make a GET fail over (ClientStats.Corrupt), never
// crash the client or make it read outside its buffers.
//
// A record larger than 4 KB is read with one READ per 4 KB, all posted
// at once into the attempt's slice of the sink; the client posts them
// itself rather than through a portal.Executor, which retries NACK and
// TIMEOUT where a GET must see the failure to go to another replica at
// once, and which would own the portal's data path.
//
// # Failover
//
// A READ that ends REMOTE_REGION, REMOTE_AUTHENTICATION_FAILURE, NACK,
// UNREACHABLE or TIMEOUT (or any other remote error) moves its GET to
// the key's next replica at once (ClientStats.Failovers by status); a
// GET fails (ErrUnavailable) only when every replica failed it twice. The
// failed replica is avoided for AvoidFor, then probed (a READ of its first
// slot) until a probe succeeds, the wait doubling up to AvoidMax. A READ
// refused for its key or region also asks the replica's goroutine for a
// new view (DESCRIBE and K_d over the key exchange): after a Rekey the
// client takes the new K_d and the replica is used again at once; a
// restarted server (another Layout.Instance) is taken the same way. With
// Hedge, a bucket READ that has waited past its replica's p99 (of the
// engine's total_delay) is sent to the next replica too, and the first
// answer wins; a replica past which hedges answered three GETs, with no
// OK READ from it in between, is avoided as a failed one (a dead engine
// is then left after a few hedges, not after TIMEOUT). Reported tells
// the caller which replica answered each GET and how often it moved.
//
// # Eviction
//
// GETs are invisible to the server, so clients report hits: each hit's
// key hash goes into a batch per replica of the key, sent as one HINTS
// message per HintBatch hashes (or HintFlush) from the replica's
// goroutine, never from the data path; a batch that cannot be sent is
// dropped. The server keeps, beside the regions, each slot's last use (a
// SET or a hint). A SET into a full bucket evicts its least recently used
// slot; a record that needs slab room evicts by CLOCK in its size class
// (a slot used since the hand last passed keeps its extent once), or takes
// a page from the class holding the most when its class has none.
//
// # Sizing
//
// The defaults (ServerConfig): 2^18 buckets of 8 slots, a 128 MB index:
// 2 M slots, room for 1 M keys of 16 B with 32 B values at half load
// (a key whose bucket is full evicts that bucket's least recently used);
// a 64 MB slab holds about 60 k values of 1 KB. Both are registered with
// the engine as regions (the engine's MaxRegionBytes, 1 GB by default,
// bounds each) and charged to the server's tenant (its memory quota, by
// default a quarter of the host's memory; huge pages within its huge
// page quota, ordinary pages beyond).
//
// # Connections
//
// The update RPC accepts through a keyx.Gate, as the key exchange does:
// temporary accept errors (EMFILE, ENFILE, ...) are retried, 5 ms
// doubling to 1 s, and never end Serve; connections beyond
// ServerConfig.Conns (held, per client address, in their handshake) are
// closed as they are accepted. A connection has HandshakeTimeout to
// authenticate; then IdleTimeout to begin each request, and
// RequestTimeout to finish it and take its reply. A client keeps its
// update and DESCRIBE connections across requests and, before it uses
// one that is idle, looks whether the server has closed it (one
// non-blocking recv; rpcConn.alive) and dials again if so, so a server's
// IdleTimeout fails no update.
//
// # Concurrency and allocation
//
// A Client is not safe for concurrent use: one per goroutine, as a
// portal. StartGet, PollGets and WaitGets allocate nothing (a GET's value
// is appended to the caller's dst). SETs and DELETEs are pipelined on
// one connection per replica (update.go): StartSet and StartDelete write
// the request and return, a goroutine per connection reads the replies
// in order and hands them back over a channel, and PollUpdates reports
// each update once every replica answered or failed it, so a client
// keeping GETs in flight is not held up by an update's round trip; Set
// and Delete wait for their own. WaitGets sleeps on the engine's
// completion doorbell (until a pending hedge is due, to the doorbell's
// millisecond). A Server's methods are
// safe for concurrent use; one mutex orders its updates.
//
// A GET is a getOp with up to two attempts (the second a hedge), each
// owning a slice of the client's sink region until its READs complete; the
// cookie of every READ names its attempt and generation, so a late
// completion of an abandoned attempt is recognised. No goroutine, lock or
// allocation is on the GET path: the replicas' goroutines (views, hints)
// hand results over through an atomic pointer and channels of
// preallocated batches. A server keeps, beside its regions, each slot's
// key hash, last use and extent (store.go), behind one mutex; clients see
// only the regions.
//
// Imports: portal, keyx, abi, aesni; never the engine.
package kv
