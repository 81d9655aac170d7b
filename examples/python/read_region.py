#!/usr/bin/env python3
"""read_region.py - read a remote region into a numpy array.

It fetches this process's K_d for the region from its owner's key
exchange (keyx, over mutual TLS 1.3, with the client credentials of
`rmactl creds`), registers a sink region as large as what it reads, READs
the remote region into it through the engine (ops of 4 KB, as many in
flight as the portal has slots) and views the sink as a numpy array
without copying it.

    read_region.py -socket /run/onerma/a.sock -server 127.0.0.1:18515 \\
                   -region 0x10001 -creds creds [-length BYTES] [-offset BYTES]

Against the README tour's rmaperf server it prints the array's first bytes
and their count, and checks them against the pattern the server fills its
region with (internal/pattern: byte i is i*31 + 7).
"""

import argparse
import sys
import time

import numpy as np

import onerma


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-socket", default=onerma.DEFAULT_SOCKET, help="the engine's control socket")
    ap.add_argument("-server", required=True, help="the owner's key exchange, HOST:PORT")
    ap.add_argument("-region", required=True, type=lambda s: int(s, 0), help="the region's id")
    ap.add_argument("-creds", required=True, help="directory of the client credentials (client.pem)")
    ap.add_argument("-offset", default=0, type=int, help="where in the region to start")
    ap.add_argument("-length", type=int, help="bytes to read (default: to the region's end)")
    a = ap.parse_args()

    with onerma.Portal(a.socket, "read-region", slots=64) as p:
        grant = p.fetch_key(a.server, a.creds, a.region, onerma.Op.READ)
        n = a.length if a.length is not None else grant.size - a.offset
        sink = p.register_region(n, onerma.Perm.LOCAL_WRITE)
        t0 = time.perf_counter()
        p.read(grant, a.offset, n, into=sink)
        dt = time.perf_counter() - t0
        arr = sink.numpy()  # the sink's memory itself: no copy
        print("read %d bytes of region %#x on %s in %.1f ms (%.0f MB/s)" % (
            n, grant.region, grant.owner, dt * 1e3, n / dt / 1e6))
        print("first bytes", arr[:8].tolist(), "sum", int(arr.sum(dtype=np.uint64)))
        want = ((np.arange(a.offset, a.offset + n, dtype=np.uint64) * 31 + 7) & 0xFF).astype(np.uint8)
        print("pattern", "ok" if np.array_equal(arr, want) else "differs")


if __name__ == "__main__":
    try:
        main()
    except onerma.OnermaError as e:
        sys.exit("read_region: %s" % e)
