// Package keyx is the key exchange every OneRMA application needs: a
// reader process asks the application that owns a region for the derived
// key K_d of its own identity (paper §4.2, Fig. 5) over a mutually
// authenticated TLS 1.3 connection, and the owner derives it from the
// region key K_r it holds (portal.Region.DeriveKey) and returns it. K_r
// never leaves the owner; K_d travels only inside TLS. A reader passes K_d
// with every op on the region (portal.Op.Key).
//
// keyx imports portal (Identity, the key and region types, and
// *portal.Region is a Region); it knows nothing of the engine.
//
// # Use
//
// The owner:
//
//	creds, err := keyx.LoadServer("/etc/onerma/creds") // or Inherited(fd)
//	r, err := p.RegisterRegion(size, portal.PermRemoteRead|portal.PermLocalWrite)
//	srv, err := keyx.NewServer(keyx.Config{Credentials: creds, Owner: p.Identity().Addr,
//		Permits: []keyx.Permit{{Client: "reader-a"}, {Client: "writer-b", Ops: keyx.Read | keyx.Write}}})
//	srv.Add(r)
//	addr, err := srv.Start("0.0.0.0:18515")
//
// A reader:
//
//	creds, err := keyx.LoadClient("/etc/onerma/creds")
//	g, err := keyx.Fetch(ctx, "hostA:18515", creds, keyx.RequestFor(p.Identity(), region, portal.OpRead))
//	err = p.Submit(&portal.Op{
//		Type: g.Op, Slot: slot, Cookie: cookie,
//		Remote: g.Owner, RemoteRegion: g.Region, Key: g.Key,
//		Local: sink, Length: 4096,
//	})
//
// portal's Example_keyx runs both sides against an in-process engine.
//
// # Credentials
//
// Both ends hold credentials from one certificate authority: its
// certificate, their own certificate and its ECDSA P-256 private key. A
// CA (NewCA) lives in its creator's memory and its private key is never
// serialized, so nobody can issue more certificates once it is dropped;
// an Authority keeps one in a directory instead (`rmactl creds DIR`:
// CreateAuthority; its key in CAKeyFile, mode 0600, or a file of the
// operator's), so that readers can be issued one at a time
// (Authority.IssueClient: a name of their own, their engines' addresses,
// a short lifetime) and revoked (Authority.Revoke, by name or serial).
// A CA issues server credentials to owners (CA.IssueServer: server-auth
// usage; the DNS names and IP addresses readers reach the owner by, plus
// localhost, 127.0.0.1 and ::1) and client credentials to readers
// (CA.IssueClient: client-auth usage only, so they cannot serve; named
// as owners' Permits name them). Credentials reach a process in one of
// two ways:
//
//   - From a launcher, over an inherited pipe (Attach before exec.Cmd.Start,
//     Inherited in the child): nothing reaches a file, a command line (only
//     the descriptor number) or the environment. OneRMA's demo and its
//     benchmark driver start their processes this way.
//   - From a directory (WriteDir; `rmactl creds DIR` calls it): ServerFile
//     for the owner's host, ClientFile copied to each reader's host,
//     CAFile for inspection; files mode 0600 in a directory of mode 0700.
//     LoadServer and LoadClient refuse a file group or others may read or
//     write, one of another user, expired certificates, and credentials
//     of the wrong role, each with an error naming the reason.
//
// # Revocation
//
// An Authority's revocation list (RevocationFile: an X.509 CRL the CA
// signs, x509.CreateRevocationList) names the client certificates it
// revoked. Server credentials loaded from a directory (LoadServer) check
// every client against the list beside them (WithRevocationFile for
// another), stat'ing it at each check and reading it again when it
// changed, so a revocation applies at a client's next request, on
// connections already open too. The Server refuses a revoked client with
// CodeRevoked and closes the connection; ServerTLS, for other services,
// fails its handshake. A list that cannot be trusted (unreadable, not
// signed by the CA, past its NextUpdate, older than one read before, or
// removed after it was read) refuses every client until it is fixed; a
// directory that never had one revokes nothing. Revocation stops a client
// from getting K_d: the K_d it holds work until the owner rekeys.
//
// # What is authenticated
//
// TLS 1.3 only, both ways:
//
//   - The owner's Server requires a client certificate signed by its CA
//     with the client-auth usage; anything else fails the handshake. A
//     revoked one is refused at its first request (Revocation).
//   - A reader (Dial, Fetch) requires the server's certificate to be signed
//     by its CA, to have the server-auth usage and to name the host it
//     dialed (the host part of HOST:PORT, a DNS name or an IP address).
//
// # What is granted
//
// The owner states its intent in Config.Permits: each Permit names a
// client by its certificate's subject common name (the name CA.IssueClient
// was given) and grants it K_d for some ops (Read, Write, Rekey, Lookup;
// Read alone when it names none; Read does not stand for Lookup) on some
// regions (all when it names none). A
// request is granted only when
//
//   - a Permit of the client's name covers the region and the op;
//   - the initiator address asked for is one of the client certificate's
//     IP addresses (CA.IssueClient's addrs: its engines') or one a
//     covering Permit grants it (Permit.Addrs, the owner's map; AnyAddress
//     grants every one);
//   - the region is served and allows the op remotely;
//   - Config.Authorize, if set, agrees.
//
// The checks run in that order, so a client granted nothing learns
// nothing of the regions served. A client of the CA that no Permit names
// gets nothing. A K_d is useful only to the process its engine stamps
// with that address and PID, so a reader that asks for another process's
// K_d on its own address gets nothing it can send with through its own
// engine; the address check keeps a stolen client certificate from
// yielding K_d for other engines' addresses. Which engine a region lives
// on is what the owner says (Grant.Owner).
//
// # Protocol (inside TLS)
//
// Every message is a frame: a big-endian u16 body length, then the body.
// A connection carries any number of request/reply pairs, one at a time.
//
//	request (16 B):
//	 0  version u8 (1)
//	 1  op u8         abi.Op: 1 READ, 2 WRITE, 3 REKEY, 4 LOOKUP
//	 2  reserved u16  zero
//	 4  initiator     the reader's engine IPv4 address, network byte order
//	 8  PID u32       the reader's identity as its engine stamps it
//	12  region u32    the region id
//
//	reply:
//	 0  version u8 (1)
//	 1  code u8       0 OK, else a Code
//	 2  reserved u16  zero
//	OK (40 B):
//	 4  region u32
//	 8  op u8, zero u8 x3
//	12  owner         the owner engine's IPv4 address
//	16  length u64    the region's size in bytes
//	24  K_d           16 B
//	refusal (5..260 B):
//	 4  message       UTF-8, why (e.g. "op 9 unknown, want 1 (READ), 2 (WRITE), 3 (REKEY) or 4 (LOOKUP)")
//
// A malformed request (CodeBadRequest) is answered and the connection
// closed; a well-formed request the owner will not grant (CodeNotGranted,
// CodeAddress, CodeUnknownRegion, CodePermission, CodeRefused) is answered
// and the connection stays open. A reader sees a refusal as a
// *RefusedError whose message says why (errors.Is with ErrNotGranted,
// ErrAddress, ErrUnknownRegion and friends); a failed handshake as an
// error that says which certificate failed and why, wrapping the x509 or
// TLS error.
//
// # Connections
//
// Server.Serve (Gate.Accept) keeps accepting through temporary accept
// errors: out of descriptors (EMFILE, ENFILE) or memory, or a connection
// that failed in the listen queue. It waits 5 ms, doubling to 1 s while
// the errors go on (as net/http does), logs at most a line a second of
// them, and starts over once a connection is accepted. A connection
// beyond Config.Conns (connections held, per client address, in their
// handshake: ConnLimits) is closed as soon as it is accepted. A
// handshake, and each request from the end of the last reply, must
// complete within Config.Timeout, or the connection is closed. So a
// flood of connections that never authenticate holds at most
// MaxHandshakes descriptors for Timeout each, and clients that did
// authenticate keep theirs. An application's own TLS service beside the
// key exchange (kv's update RPC) uses a Gate the same way.
//
// # K_d after a Rekey
//
// A K_d is derived from the region's K_r at the time of the Fetch. When
// the owner installs a new K_r (portal.Portal.Rekey), every K_d of the old
// one stops working at once: the owner's engine answers ops made with it
// REMOTE_AUTHENTICATION_FAILURE, which a reader takes as the signal to
// fetch again (Conn.Fetch on the connection it kept, or Fetch) and retry
// with the new K_d. The owner rekeys inside Server.Update
// (srv.Update(func() error { return p.Rekey(r, kr) })) so that no reader is
// handed a K_d of the old K_r once Rekey has returned; a K_d fetched just
// before can still fail once. A reader should bound its refetches: a
// REMOTE_AUTHENTICATION_FAILURE right after a fresh Fetch means something
// other than a stale K_d (a remote REKEY, below, or an identity that is
// not the one the engine stamps).
//
// A remote REKEY (a portal.Op of type OpRekey, with the REKEY K_d)
// installs a K_r the owner's process does not know: its Server keeps
// deriving from the old one, and readers must get K_d from whoever chose
// the new key. An owner that serves K_d should not grant REKEY K_d (leave
// portal.PermRemoteRekey off, and Rekey out of its Permits) unless that
// is the design.
//
// # Keys stay out of logs
//
// Nothing here formats a key: Grant's and Credentials' String and
// GoString omit it, and Server logs say who got which K_d (region, op,
// initiator, certificate name), never the key. Buffers that held a key or
// a PEM private key are zeroed after use (best effort: Go's TLS stack and
// ecdsa keep their own copies).
package keyx
