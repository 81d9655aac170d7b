// Package protocoldoc keeps docs/protocol.md, the written protocol of the
// engine, true to the code. It has no code of its own: its test parses the
// document's tables marked `<!-- protocol-table: NAME -->` and checks each
// against package abi and package ctlmsg (offsets and sizes by encoding
// values and reading them back at the documented places, constants,
// statuses, ops, permission bits, request ops and their keys by what
// ctlmsg.DecodeRequest accepts, response keys by ctlmsg's JSON tags,
// refusal codes by ctlmsg's source, the key derivation block by
// recomputing aesni.DeriveKey), the key exchange's tables against package
// keyx (its constants from its source, its files and refusal codes, the
// request, grant and refusal layouts on the bytes keyx's client and
// server exchange over TLS on loopback), and checks libonerma's public
// header and its error tables against the same. The test needs neither
// root nor DPDK.
package protocoldoc
