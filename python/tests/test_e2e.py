"""A Python reader on engine A of a memif wire and, on engine B, the
tree's other applications: the C owner of examples/c, a Go key/value
server (rmakv server) and a Go key service (rmaperf server). Reads checked
byte for byte, writes seen by the owner, the cache's values as Go's client
sees them, and every credential refusal with its reason."""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys

import pytest

import bed
import onerma
from conftest import engines
from onerma import ErrorCode, Op, Perm, Status, kv

IP_A, IP_B = "10.97.10.1", "10.97.10.2"


@pytest.fixture(scope="module")
def pair(lib, tmp_path_factory):
    engines()
    d = str(tmp_path_factory.mktemp("pair"))
    n = os.getpid() % 10000
    a, b = bed.memif_pair(d, "py-a%d" % n, "py-b%d" % n, IP_A, IP_B)
    a.start()
    try:
        b.start()
    except Exception:
        a.stop()
        raise
    yield a, b
    b.stop()
    a.stop()


@pytest.fixture
def reader(pair):
    p = onerma.Portal(pair[0].socket, "py-reader", slots=16)
    yield p
    assert p.outstanding == 0
    p.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """A Go server on engine B, started, its ready line read."""

    def __init__(self, args, ready):
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL, preexec_fn=bed._pdeathsig)
        for line in self.p.stdout:
            if line.startswith(ready):
                self.line = line.strip()
                return
        raise AssertionError("%s exited (%s): %s" % (args[0], self.p.wait(), self.p.stderr.read()))

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.stderr.read()


def creds(dir):
    out = subprocess.run([bed.tool("rmactl"), "creds", dir], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return dir


def test_c_owner(reader, pair):
    """examples/c/owner.c owns a region on B and derives K_d for the Python
    reader on A: READs of 1 B to 64 KB checked against its pattern, a batch
    under one doorbell, WRITEs seen in the C owner's memory (its dump) and
    read back, a K_d of the wrong op refused, and the C owner's rekey."""
    own = bed.Proc([bed.tool("onerma-c-owner"), "-socket", pair[1].socket, "-size", str(64 << 10)])
    try:
        f = own.line(10).split()
        assert f[0] == "region" and f[1] == IP_B, f
        rid, size = int(f[2]), int(f[3])
        me = reader.identity

        def keys():
            k = own.ask("kd %s %d" % (me.address, me.pid))
            assert k[0] == "kd" and len(k) == 4, k
            return [onerma.Remote(IP_B, rid, bytes.fromhex(x), size) for x in k[1:]]

        rd, wr, _ = keys()
        for k, n in enumerate([1, 64, 1409, 4096, 4097, 20000]):
            off = (k * 4099 + 7) % (size - n)
            assert reader.read(rd, off, n) == bed.patterned(off, n), n
        sink = reader.register_region(16 * 4096, Perm.LOCAL_WRITE)
        assert reader.read(rd, 0, into=sink).tobytes() == bed.patterned(0, 16 * 4096)
        for k in range(16):
            reader.post_read(rd, k * 100, 4096, sink, k * 4096, cookie=k)
        got = []
        while len(got) < 16:
            got += reader.wait(timeout=10)
        for c in got:
            c.check()
            assert c.total_delay_ns > 0 and c.issue_delay_ns <= c.total_delay_ns
            assert sink.view[c.cookie * 4096:(c.cookie + 1) * 4096] == bed.patterned(c.cookie * 100, 4096)
        data = os.urandom(3000)
        reader.write(wr, 5000, data)
        assert own.ask("dump 5000 3000") == ["dump", data.hex()]
        assert reader.read(rd, 5000, 3000) == data
        with pytest.raises(onerma.StatusError) as ei:
            reader.read(wr, 0, 64)
        assert ei.value.status is Status.REMOTE_AUTHENTICATION_FAILURE
        assert own.ask("rekey") == ["rekeyed"]
        with pytest.raises(onerma.StatusError) as ei:
            reader.read(rd, 0, 64)
        assert ei.value.status is Status.REMOTE_AUTHENTICATION_FAILURE
        rd, _, _ = keys()
        assert reader.read(rd, 0, 64) == bed.patterned(0, 64)
    finally:
        own.close()


@pytest.fixture(scope="module")
def kv_server(pair, keyx_lib, tmp_path_factory):
    d = creds(str(tmp_path_factory.mktemp("kv") / "creds"))
    port = free_port()
    srv = Server([bed.tool("rmakv"), "server", "-socket", pair[1].socket, "-creds", d, "-listen",
                  "127.0.0.1:%d" % port, "-buckets", "1024", "-slab", str(8 << 20), "-q"], "rmakv: serving rpc ")
    assert srv.line.endswith("engine " + IP_B), srv.line
    yield d, "127.0.0.1:%d" % port, pair[1].socket
    srv.stop()


def go_kv(cmd, creds_dir, server, sock, *args):
    return subprocess.run([bed.tool("rmakv"), cmd, "-socket", sock, "-creds", creds_dir, "-servers", server] + list(args),
                          capture_output=True, text=True, timeout=60)


def test_kv_get(reader, kv_server):
    """Values Go's client SETs, read by onerma.kv's GETs (one-sided READs
    of the server's index and slab regions on B, validated as kv does):
    inline in their slot, in a record of one READ, and of several; a
    missing key; SET and DELETE from Python seen by Go's client."""
    d, server, sock = kv_server
    c = kv.Client(reader, [server], d)
    rnd = random.Random(7)
    values = {"k-inline": "v" * 20, "k-one": "x" * 1000, "k-several": "".join(
        rnd.choice("abcdefghij") for _ in range(10000)), "k-max": "m" * 65536}
    for k, v in values.items():
        out = go_kv("set", d, server, sock, k, v)
        assert out.returncode == 0, out.stderr
    for k, v in values.items():
        assert c.get(k.encode()) == v.encode(), k
    assert c.get(b"never-set") is None and c.get(b"never-set", b"-") == b"-"
    # An update read at once: a new value in place of the old.
    out = go_kv("set", d, server, sock, "k-one", "y" * 2000)
    assert out.returncode == 0, out.stderr
    assert c.get(b"k-one") == b"y" * 2000
    # Python's SET and DELETE, seen by Go's client.
    c.set(b"from-python", b"p" * 300)
    out = go_kv("get", d, server, sock, "from-python")
    assert out.returncode == 0 and out.stdout.strip() == "p" * 300, out
    assert c.get(b"from-python") == b"p" * 300
    assert c.delete(b"from-python") and not c.delete(b"from-python")
    assert c.get(b"from-python") is None
    out = go_kv("get", d, server, sock, "from-python")
    assert out.returncode != 0
    assert reader.outstanding == 0


@pytest.fixture
def key_service(pair, keyx_lib, tmp_path):
    """rmaperf server on B with fresh credentials: its region filled with
    internal/pattern's bytes, K_d served over keyx."""
    d = creds(str(tmp_path / "creds"))
    port = free_port()
    srvs = []

    def start(*grants):
        args = [bed.tool("rmaperf"), "server", "-socket", pair[1].socket, "-creds", d, "-listen",
                "127.0.0.1:%d" % port]
        for g in grants:
            args += ["-grant", g]
        s = Server(args, "rmaperf server: region ")
        srvs.append(s)
        return int(s.line.split()[3], 16)

    yield d, "127.0.0.1:%d" % port, start, srvs
    for s in srvs:
        s.stop()


def perf_pattern(off, n):
    return bytes((i * 31 + 7) & 0xFF for i in range(off, off + n))


def issue(d, name, ip, out):
    r = subprocess.run([bed.tool("rmactl"), "creds", "issue", "-creds", d, "-name", name, "-ip", ip, "-out", out],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_keyx(reader, key_service, tmp_path):
    """K_d fetched from rmaperf server over keyx: READ and WRITE through
    grants; then each refusal with its reason: a client not granted, one
    granted READ asking for WRITE, a revoked one, a foreign CA's, and
    credentials of a loose mode."""
    d, addr, start, srvs = key_service
    region = start()
    g = reader.fetch_key(addr, d, region)
    assert isinstance(g, onerma.Grant) and g.owner == IP_B and g.region == region and g.op is Op.READ
    assert g.size == 1 << 20 and "key" not in repr(g)
    assert reader.read(g, 12345, 5000) == perf_pattern(12345, 5000)
    w = onerma.keyx.fetch(addr, d, reader, region, Op.WRITE)
    reader.write(w, 100, b"from python")
    assert reader.read(g, 100, 11) == b"from python"
    with onerma.KeyExchange(addr, d) as kx:
        assert kx.peer_name
        assert kx.fetch(reader.identity, region).key == g.key

    def refused(fn, cls, code, *words):
        with pytest.raises(cls) as ei:
            fn()
        e = ei.value
        assert e.code is code, (e.code, str(e))
        for w in words:
            assert w in str(e), (w, str(e))
        assert e.reason in str(e)
        return e

    dash = issue(d, "dash", IP_A, str(tmp_path / "dash"))
    e = refused(lambda: reader.fetch_key(addr, dash, region), onerma.Refused, ErrorCode.KX_NOT_GRANTED,
                "not granted", 'certificate "dash"')
    assert "not granted" in e.reason and e.detail.startswith('certificate "dash"')
    srvs.pop().stop()
    region = start("onerma-client=read+write@any", "dash=read")
    g = reader.fetch_key(addr, dash, region)
    assert reader.read(g, 0, 64) == perf_pattern(0, 64)
    refused(lambda: reader.fetch_key(addr, dash, region, Op.WRITE), onerma.Refused, ErrorCode.KX_NOT_GRANTED,
            "not granted WRITE")
    r = subprocess.run([bed.tool("rmactl"), "creds", "revoke", "-creds", d, "-name", "dash"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    refused(lambda: reader.fetch_key(addr, dash, region), onerma.Refused, ErrorCode.KX_REVOKED,
            "certificate revoked", "was revoked")
    # Another CA's client: the owner's certificate is not from its CA.
    other = creds(str(tmp_path / "other"))
    with pytest.raises(onerma.KeyxError) as ei:
        reader.fetch_key(addr, other, region)
    assert ei.value.code in (ErrorCode.SERVER_CERT, ErrorCode.CERT_REFUSED), str(ei.value)
    # A credentials file group and others may read.
    loose = str(tmp_path / "loose")
    os.mkdir(loose, 0o700)
    shutil.copy(os.path.join(d, "client.pem"), loose)
    os.chmod(os.path.join(loose, "client.pem"), 0o644)
    refused(lambda: reader.fetch_key(addr, loose, region), onerma.CredentialsError, ErrorCode.CREDS_FILE,
            "mode 0644")
    refused(lambda: onerma.keyx.check_creds(loose), onerma.CredentialsError, ErrorCode.CREDS_FILE)
    # No credentials at all.
    with pytest.raises(onerma.CredentialsError) as ei:
        reader.fetch_key(addr, str(tmp_path / "none"), region)
    # The good client still reads.
    assert reader.read(reader.fetch_key(addr, d, region), 0, 64) == perf_pattern(0, 64)


def example(name, *args):
    """Run examples/python/NAME with the package from the source tree."""
    env = dict(os.environ, PYTHONPATH=os.path.join(bed.ROOT, "python"))
    return subprocess.run([sys.executable, os.path.join(bed.ROOT, "examples", "python", name)] + list(args),
                          capture_output=True, text=True, env=env, timeout=60)


def test_example_read_region(pair, key_service):
    """examples/python/read_region.py reads rmaperf server's region into a
    numpy array and finds its pattern."""
    pytest.importorskip("numpy")
    d, addr, start, _ = key_service
    region = start()
    out = example("read_region.py", "-socket", pair[0].socket, "-server", addr, "-region", hex(region), "-creds", d,
                  "-offset", "100", "-length", str(300000))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("read 300000 bytes of region %#x on %s" % (region, IP_B)), out.stdout
    assert lines[1].startswith("first bytes %s" % list(perf_pattern(100, 8))), out.stdout
    assert lines[2] == "pattern ok", out.stdout


def test_example_kv_get(pair, kv_server):
    """examples/python/kv_get.py SETs and GETs through the cache."""
    d, server, sock = kv_server
    out = example("kv_get.py", "-socket", pair[0].socket, "-creds", d, "-servers", server,
                  "-set", "ex-key=ex value", "ex-key", "ex-missing")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["ex-key ex value", "ex-missing (not found)"]
