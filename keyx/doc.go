// Package keyx hands out derived keys K_d (paper §4.2, Fig. 5): a reader
// process asks the application that owns a region for the K_d of its own
// identity over a mutually authenticated TLS 1.3 connection, and the owner
// derives it from the region key K_r it holds (portal.Region.DeriveKey)
// and returns it. K_r never leaves the owner; K_d travels only inside TLS.
//
// # Who holds what
//
//   - The launching process (the demo's orchestrator, rmabench) makes a
//     throwaway certificate authority in memory (NewCA: ECDSA P-256,
//     crypto/x509), issues one leaf per child (IssueServer for an owner,
//     IssueClient for a reader) and hands each child its credentials (the CA
//     certificate, its leaf, its private key, as PEM) over an inherited
//     pipe (Attach, which uses exec.Cmd.ExtraFiles). The child reads them
//     once at start-up (Inherited). Nothing is written to a file, a command
//     line (only the fd number is there) or the environment; the CA's
//     private key never leaves the launcher's memory.
//   - An owner runs a Server on a loopback address (Server.Start) serving
//     its regions (Server.Add). It requires a client certificate from the
//     CA with the client-auth usage (TLS 1.3 only).
//   - A reader fetches a Grant (Fetch, or Dial and Conn.Fetch), verifying
//     that the server's certificate is from the CA, has the server-auth
//     usage and names ServerName.
//
// # Protocol (inside TLS)
//
// Every message is a frame: a big-endian u16 body length, then the body.
// A connection carries any number of request/reply pairs.
//
//	request (16 B):
//	 0  version u8 (1)
//	 1  op u8         abi.Op: 1 READ, 2 WRITE, 3 REKEY
//	 2  reserved u16  zero
//	 4  initiator     the reader's engine IPv4 address, network byte order
//	 8  PID u32       the reader's PID as its engine stamps it (SO_PEERCRED)
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
//	 4  message       UTF-8, why (e.g. "op 9 unknown, want 1 (READ), 2 (WRITE) or 3 (REKEY)")
//
// A malformed request (CodeBadRequest) is answered and the connection
// closed; a well-formed request the owner will not grant
// (CodeUnknownRegion, CodePermission, CodeRefused) is answered and the
// connection stays open.
//
// # What membership in the CA means
//
// Any holder of a client certificate from the CA may ask for the K_d of
// any (address, PID, op) for any region the owner serves; Config.Authorize
// narrows that. A K_d is useful only to the process its engine stamps with
// that address and PID, so a reader that asks for another process's K_d
// gets nothing it can send with through its own engine.
//
// # Keys stay out of logs
//
// Nothing here formats a key: Grant's String and GoString omit it, and
// Server logs say who got which K_d (region, op, initiator, certificate
// name), never the key. Buffers that held a key or a PEM private key are
// zeroed after use (best effort: Go's TLS stack and ecdsa keep their own
// copies).
package keyx
