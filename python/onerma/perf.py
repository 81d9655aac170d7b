"""python3 -m onerma.perf: rmaperf's read tests through this package, with
rmaperf's flags where they apply and its -json row (internal/benchrow.Row)
of system "onerma-python".

    python3 -m onerma.perf read_bw  -socket PATH -self [-s SIZE] [-O N] [-D DURATION] [-json]
    python3 -m onerma.perf read_lat -socket PATH -self [-s SIZE] [-D DURATION] [-json]

read_bw keeps O READs in flight with the batch API (post_read while slots
are free, then wait, which publishes them with one store and returns the
completions there are); its latencies are post to completion. read_lat
times one Portal.read call: post, wait, and the bytes back as a Python
object. -self reads a region of the process's own engine (loopback), as
rmaperf -self does; -server, -region and -creds fetch the K_d of an
rmaperf server's region over keyx. Each row carries cpu_ns_per_op, the
process's CPU time (getrusage RUSAGE_SELF) per op over the measured
interval.
"""

import argparse
import json
import re
import resource
import shlex
import sys
import time

import onerma
from onerma import Op, Perm

_DUR = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m)$")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def duration(s):
    """A Go-style duration (500ms, 5s, 1m) in seconds."""
    m = _DUR.match(s)
    if not m:
        raise argparse.ArgumentTypeError("invalid duration %r (want e.g. 500ms, 5s)" % s)
    return float(m.group(1)) * _UNIT[m.group(2)]


def pattern(off, n):
    """internal/pattern: byte off of a measured region is off*31 + 7."""
    return bytes((i * 31 + 7) & 0xFF for i in range(off, off + n))


def quantile(sorted_ns, q):
    if not sorted_ns:
        return 0
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))]


def cpu_ns():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1e9)


def read_bw(p, target, region_bytes, size, depth, sink, warm, dur, verify):
    """Keep depth READs in flight for warm, then dur seconds; returns (ops,
    errors, first status, seconds, latencies ns, engine delays ns, CPU ns)."""
    posted_at = [0] * depth  # by cookie: the op's sink area
    span = max(1, region_bytes // size - 1)
    lat, eng = [], []
    ops = errs = 0
    first = None
    k = 0
    now = time.perf_counter_ns
    t_end_warm = now() + int(warm * 1e9)
    measuring = False
    t0 = c0 = t1 = c1 = 0
    t_end = 0
    inflight = 0
    free = list(range(depth))
    while True:
        t = now()
        if not measuring and t >= t_end_warm:
            measuring, t0, c0 = True, t, cpu_ns()
            t_end = t0 + int(dur * 1e9)
            lat.clear()
            eng.clear()
            ops = errs = 0
        stop = measuring and t >= t_end
        if stop and not t1:
            t1, c1 = t, cpu_ns()  # the end of the measured interval; then drain
        if not stop:
            while free and p.free_slots:
                i = free.pop()
                off = (k % span) * size
                k += 1
                posted_at[i] = t
                p.post_read(target, off, size, sink, i * size, cookie=i | off << 16)
                inflight += 1
        if inflight == 0:
            break
        for c in p.wait(timeout=10):
            i = c.cookie & 0xFFFF
            free.append(i)
            inflight -= 1
            done = now()
            if c.status:
                errs += 1
                first = first or c.status
            elif verify:
                off = c.cookie >> 16
                if sink.view[i * size:(i + 1) * size] != pattern(off, size):
                    raise SystemExit("onerma.perf: READ at %d read bytes that are not the pattern" % off)
            if measuring and not stop:
                ops += 1
                lat.append(done - posted_at[i])
                eng.append(c.total_delay_ns)
    return ops, errs, first, (t1 - t0) / 1e9, lat, eng, c1 - c0


def read_lat(p, target, region_bytes, size, warm, dur, verify):
    """One Portal.read call at a time for warm, then dur seconds."""
    span = max(1, region_bytes // size - 1)
    lat = []
    ops = errs = 0
    first = None
    k = 0
    now = time.perf_counter_ns
    t = now()
    t_end_warm = t + int(warm * 1e9)
    while now() < t_end_warm:
        p.read(target, 0, size)
    t0, c0 = now(), cpu_ns()
    t_end = t0 + int(dur * 1e9)
    while True:
        off = (k % span) * size
        k += 1
        a = now()
        try:
            data = p.read(target, off, size)
        except onerma.StatusError as e:
            if isinstance(e, onerma.EngineGone):
                raise
            errs += 1
            first = first or e.status
            data = None
        b = now()
        ops += data is not None
        if data is not None:
            lat.append(b - a)
            if verify and data != pattern(off, size):
                raise SystemExit("onerma.perf: READ at %d read bytes that are not the pattern" % off)
        if b >= t_end:
            break
    return ops, errs, first, (now() - t0) / 1e9, lat, [], cpu_ns() - c0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python3 -m onerma.perf", description=__doc__.split("\n\n")[0])
    ap.add_argument("test", choices=["read_bw", "read_lat"])
    ap.add_argument("-socket", default=onerma.DEFAULT_SOCKET, help="engine control socket")
    ap.add_argument("-self", action="store_true", help="read a region of this process's own engine (loopback)")
    ap.add_argument("-server", help="an rmaperf server's key exchange, HOST:PORT (with -region and -creds)")
    ap.add_argument("-region", type=lambda s: int(s, 0), help="the rmaperf server's region id")
    ap.add_argument("-creds", help="directory of the client credentials (client.pem)")
    ap.add_argument("-s", type=int, default=64, help="op size in bytes (1..4096)")
    ap.add_argument("-O", type=int, default=32, help="ops kept in flight (read_lat: 1)")
    ap.add_argument("-D", type=duration, default=5.0, help="measurement duration")
    ap.add_argument("-warmup", type=duration, default=0.5, help="warm-up before measuring")
    ap.add_argument("-spins", type=int, default=0, help="polls before sleeping on the doorbell (0: libonerma's default, -1: none)")
    ap.add_argument("-region-bytes", type=int, default=1 << 20, help="with -self: bytes of the region read")
    ap.add_argument("-verify", action="store_true", help="check every byte read")
    ap.add_argument("-json", action="store_true", help='print one JSON line (rmaperf\'s row, system "onerma-python")')
    ap.add_argument("-setup", default="", help="setup label for -json (loopback, ...)")
    ap.add_argument("-name", default="onerma-perf-py", help="application name presented to the engine")
    a = ap.parse_args(argv)
    if not 1 <= a.s <= onerma.MAX_OP_BYTES:
        ap.error("-s %d: want 1..4096" % a.s)
    depth = 1 if a.test == "read_lat" else a.O
    if not 1 <= depth <= 4096:
        ap.error("-O %d: want 1..4096" % a.O)
    if a.self == bool(a.server):
        ap.error("want -self, or -server with -region and -creds")
    if a.server and (a.region is None or not a.creds):
        ap.error("-server needs -region and -creds")

    with onerma.Portal(a.socket, a.name, slots=depth, wait_spins=a.spins) as p:
        if a.self:
            r = p.register_region(a.region_bytes, Perm.REMOTE_READ | Perm.LOCAL_WRITE)
            r.view[:] = pattern(0, a.region_bytes)
            target, region_bytes = r.remote_for(p.identity, Op.READ), a.region_bytes
        else:
            target = p.fetch_key(a.server, a.creds, a.region, Op.READ)
            region_bytes = target.size
        if a.test == "read_bw":
            sink = p.register_region(depth * a.s, Perm.LOCAL_WRITE)
            ops, errs, first, secs, lat, eng, cpu = read_bw(p, target, region_bytes, a.s, depth, sink, a.warmup, a.D,
                                                            a.verify)
        else:
            ops, errs, first, secs, lat, eng, cpu = read_lat(p, target, region_bytes, a.s, a.warmup, a.D, a.verify)
    lat.sort()
    eng.sort()
    ops_s = ops / secs if secs > 0 else 0.0
    row = {
        "system": "onerma-python", "setup": a.setup, "test": a.test, "size": a.s, "outstanding": depth, "cores": 1,
        "ops_per_sec": ops_s, "mb_per_sec": ops_s * a.s / 1e6,
        "p50_us": quantile(lat, 0.5) / 1e3, "p99_us": quantile(lat, 0.99) / 1e3, "p999_us": quantile(lat, 0.999) / 1e3,
    }
    if eng:
        row.update(eng_p50_us=quantile(eng, 0.5) / 1e3, eng_p99_us=quantile(eng, 0.99) / 1e3,
                   eng_p999_us=quantile(eng, 0.999) / 1e3, eng_max_us=eng[-1] / 1e3)
    if ops:
        row["ops"] = ops
    row.update(errors=errs, seconds=secs,
               command=" ".join(shlex.quote(x) for x in ["python3", "-m", "onerma.perf"] + list(argv)))
    if errs:
        row["note"] = "first non-OK status %s" % getattr(first, "name", first)
    if ops:
        row["cpu_ns_per_op"] = cpu / ops
    if a.json:
        print(json.dumps(row))
        return 0
    print("%-9s %8s %4s %12s %10s %9s %9s %9s %11s %8s %10s" % (
        "test", "size", "O", "ops/s", "MB/s", "p50_us", "p99_us", "p99.9_us", "eng_p50_us", "errors", "cpu_ns/op"))
    print("%-9s %8d %4d %12.0f %10.1f %9.2f %9.2f %9.2f %11.2f %8d %10.1f" % (
        a.test, a.s, depth, ops_s, row["mb_per_sec"], row["p50_us"], row["p99_us"], row["p999_us"],
        row.get("eng_p50_us", 0.0), errs, row.get("cpu_ns_per_op", 0.0)))
    if errs:
        print("note: " + row["note"])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except onerma.OnermaError as e:
        sys.exit("onerma.perf: %s" % e)
