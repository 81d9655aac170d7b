// Package cli is the command-line vocabulary the OneRMA tools share: a
// flag.FlagSet that knows its command's synopsis and example invocations,
// accepts old spellings of a flag as aliases of the canonical one, and
// prints on -h a usage text of synopsis, examples and flags in which each
// alias appears once, as "-ctl: alias of -socket".
//
// The vocabulary (the same flag for the same thing in every tool, with
// perftest's spellings where rmaperf has them):
//
//	-socket PATH      the engine's control socket (ctlmsg.DefaultSocket)
//	-D DURATION       measured duration
//	-s BYTES          bytes per op, value size
//	-O N              ops (or transfers, GETs) in flight
//	-json             JSON output
//	-q                quiet
//	-creds DIR        TLS credential directory (rmactl creds)
//	-creds-fd FD      TLS credentials on an inherited descriptor
//	-bin DIR          directory of built binaries (lab tools)
//	-out PATH         output file or directory
//	-rmad PATH        the rmad binary
//	-listen HOST:PORT listen address
//
// Errors about a flag's value name the flag and say what is wanted
// ("-s 5000: want 1..4096"); the tool prefixes its name.
//
// Place in the import graph: a leaf (standard library only), imported by
// binaries only; libraries never parse flags.
package cli
