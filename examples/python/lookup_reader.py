#!/usr/bin/env python3
"""lookup_reader.py - LOOKUPs of a remote region with a bucket layout.

A reader driven line by line, as examples/c/reader.c is: the owner hands
it the K_d for LOOKUP (Region.remote_for, or Go's Region.DeriveKey with
OpLookup), and it looks tags up in the region's buckets, each LOOKUP one
round trip that answers with the matched entry and the bytes it points to.

    lookup_reader.py -socket /run/onerma/rmad.sock -remote 10.98.0.2

It prints "identity ADDR IDENTITY" (what the owner derives K_d for), then
reads commands on stdin, one a line:

    lookup REGION OFFSET TAG LENGTH BUCKET KD
        a LOOKUP of TAG (hex) in the bucket at OFFSET of REGION with the
        K_d KD (hex), into a sink whose first LENGTH bytes are set to ee
        first, BUCKET 1 asking for the bucket on a miss
        -> lookup STATUS ANSWER_LENGTH HEX (the answer: entry, then the
           target from the next multiple of 64; on REMOTE_NOT_FOUND, the
           bucket when it came back), or lookup post ERROR when the
           library refused the op
"""

import argparse
import sys

import onerma


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-socket", default=onerma.DEFAULT_SOCKET, help="the engine's control socket")
    ap.add_argument("-remote", required=True, help="the owner's engine address")
    a = ap.parse_args()

    with onerma.Portal(a.socket, "py-lookup", slots=4) as p:
        sink = p.register_region(onerma.MAX_OP_BYTES, onerma.Perm.LOCAL_WRITE)
        print("identity %s %d" % (p.identity.address, p.identity.pid), flush=True)
        for line in sys.stdin:
            f = line.split()
            if len(f) != 7 or f[0] != "lookup":
                print("error unknown command", flush=True)
                continue
            region, off, tag, length, bucket = int(f[1]), int(f[2]), int(f[3], 16), int(f[4]), f[5] == "1"
            target = onerma.Remote(a.remote, region, bytes.fromhex(f[6]))
            sink.view[:length] = b"\xee" * length
            try:
                answer = p.lookup(target, off, tag, into=sink, length=length, bucket=bucket, timeout=10)
                print("lookup OK %d %s" % (len(answer), answer.hex()))
            except onerma.NotFound as e:
                got = e.bucket or b""
                print("lookup %s %d %s" % (e.status.name, e.completion.length, got.hex()))
            except onerma.StatusError as e:
                print("lookup %s %d" % (e.status.name, getattr(e.completion, "length", 0)))
            except onerma.OnermaError as e:
                print("lookup post %s" % e)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
