// Package ctlmsg defines the messages of the engine's control socket (the
// 1RMA driver of paper §4.1): the requests an application's portal library
// sends to rmad and the responses it gets back.
//
// Transport: a unix-domain SOCK_SEQPACKET connection; one message is one
// datagram holding one JSON object, never larger than MaxRequestBytes
// (requests) or MaxResponseBytes (responses). File descriptors (the portal
// segment, a region's memory) travel beside a response as SCM_RIGHTS
// ancillary data. Requests carry no file descriptors: the engine closes any
// it receives and rejects the request.
//
// Requests are untrusted bytes from any local process that can connect, so
// DecodeRequest is strict: exactly one flat JSON object, no unknown,
// duplicate or misplaced keys (every key must belong to the op), integers
// only in decimal without sign, fraction or exponent, every value within
// its documented range. Any violation is an error naming the key; on error
// the decoded request is zero. FuzzDecodeRequest checks that nothing panics
// and that every accepted request round-trips through EncodeRequest.
//
// Keys. register_region and rekey carry a region key K_r (paper §4.2: the
// application chooses it) as 32 lowercase hex digits in "key". The socket
// is local (SO_PEERCRED-identified peers on this host), so the key travels
// in clear on it, never on the network. Key values are secret: the Key
// type formats as "[redacted]" under fmt and JSON, no decode error quotes
// a key, and the engine logs neither requests nor keys.
//
// Place in the import graph: a leaf (imports abi only), shared by
// engine/ctl (the server) and portal (the client), so an application never
// links the engine to talk to it.
package ctlmsg
