#!/usr/bin/env python3
"""kv_get.py - read OneRMA's key/value cache from Python.

Each GET is one-sided: a READ of the key's bucket in a server's index
region and, when the value is not in its slot, READs of its record in the
slab region, validated as kv documents (sequence, XXH64 sums, stamps,
bounds; onerma.kv). The server's application takes no part; only its
engine serves the READs. The layout comes from the server's RPC
(DESCRIBE), the K_d of both regions from its key exchange.

    kv_get.py -socket /run/onerma/rmad.sock -creds creds -servers 127.0.0.1:7001 KEY...

It prints each key and its value (or "(not found)"); with -set KEY=VALUE
it SETs first (a client granted WRITE).
"""

import argparse
import sys

import onerma
from onerma import kv


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-socket", default=onerma.DEFAULT_SOCKET, help="the engine's control socket")
    ap.add_argument("-creds", required=True, help="directory of the client credentials (client.pem)")
    ap.add_argument("-servers", required=True, help="the servers' RPC addresses, HOST:PORT,...")
    ap.add_argument("-set", action="append", default=[], metavar="KEY=VALUE", help="SET before reading (repeat)")
    ap.add_argument("keys", nargs="*")
    a = ap.parse_args()

    with onerma.Portal(a.socket, "kv-get") as p:
        c = kv.Client(p, a.servers.split(","), a.creds)
        for s in a.set:
            k, _, v = s.partition("=")
            c.set(k.encode(), v.encode())
        for k in a.keys:
            v = c.get(k.encode())
            print(k, "(not found)" if v is None else v.decode("utf-8", "backslashreplace"))


if __name__ == "__main__":
    try:
        main()
    except onerma.OnermaError as e:
        sys.exit("kv_get: %s" % e)
