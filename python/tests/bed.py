"""A test bed of real engines for the tests: rmad processes from the
tree's bin/ (or $ONERMA_BIN), started as internal/testbed starts them for
the Go e2e tests (same flags, same EAL arguments, the same relaxed
timeouts), and the tree's other programs (rmactl, rmaperf, rmakv, the C
examples) beside them.

Engines need root and a built rmad; without them the tests that need one
skip, saying why, except in CI (CI=true), where they fail.
"""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))

# The timeouts of the e2e tests' engines (e2e/main_test.go, relaxed): the
# test shares two CPUs with the engines.
RELAXED = ["-dispatch-timeout", "500ms", "-timeout", "1s"]


def bin_dir():
    return os.environ.get("ONERMA_BIN") or os.path.join(ROOT, "bin")


def tool(name):
    """The path of one of the tree's programs: bin/ (make build), or the C
    examples' and onerma-perf's build directory."""
    for d in (bin_dir(), os.path.join(ROOT, "libonerma", "build", "examples"),
              os.path.join(ROOT, "libonerma", "build", "tools")):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return os.path.join(bin_dir(), name)


def why_no_engines():
    """Why real engines cannot run here ("" when they can)."""
    if os.geteuid() != 0:
        return "real DPDK engines need root"
    rmad = os.path.join(bin_dir(), "rmad")
    if not os.path.exists(rmad):
        return "no rmad binary at %s (make build)" % rmad
    return ""


def hugepages_free():
    free, mounted = 0, False
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("HugePages_Free:"):
                    free = int(line.split()[1])
        with open("/proc/mounts") as f:
            mounted = " hugetlbfs " in f.read()
    except OSError:
        pass
    return free, mounted


def eal_args(name):
    """internal/testbed.EALArgs."""
    args = ["--no-pci", "--file-prefix=onerma-" + name, "--lcores=0@(0-1)"]
    free, mounted = hugepages_free()
    if mounted and free >= 48:
        return args + ["-m", "64", "--huge-unlink"]
    return args + ["--no-huge", "-m", "128"]


def _pdeathsig():
    # The engine dies with the test process, as testbed's Pdeathsig does.
    libc = ctypes.CDLL(None)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def answers(path):
    """Whether something accepts on the unix seqpacket socket at path."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class Engine:
    """One rmad process: Engine(dir, name, ip, port_name, vdev, extra)."""

    def __init__(self, dir, name, ip, port_name, vdev, extra=(), mode="backoff"):
        self.dir, self.name, self.ip, self.mode = dir, name, ip, mode
        self.port_name, self.vdev, self.extra = port_name, vdev, list(extra)
        self.socket = os.path.join(dir, name + ".sock")
        self.log = os.path.join(dir, name + ".log")
        self.proc = None

    def args(self):
        return [os.path.join(bin_dir(), "rmad"), "-eal", " ".join(eal_args(self.name)),
                "-port-name", self.port_name, "-vdev", self.vdev, "-ip", self.ip, "-socket", self.socket,
                "-poll-mode", self.mode, "-cpu", "-1", "-iv-state", os.path.join(self.dir, self.name + ".iv")
                ] + RELAXED + self.extra

    def start(self, within=30.0):
        sock = _memif_server_socket(self.vdev)
        if sock and os.path.exists(sock):
            os.remove(sock)  # left by the engine before on this wire
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.args(), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=_pdeathsig)
        deadline = time.monotonic() + within
        while not answers(self.socket):
            if self.proc.poll() is not None:
                raise RuntimeError("rmad %s exited during start-up (%s):\n%s" % (self.name, self.proc.returncode,
                                                                                  self.tail()))
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("rmad %s not ready after %.0f s:\n%s" % (self.name, within, self.tail()))
            time.sleep(0.02)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def stop(self, within=10.0):
        """SIGTERM, and wait; an engine that does not exit cleanly is killed
        and reported."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(within)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("rmad %s did not stop within %.0f s:\n%s" % (self.name, within, self.tail()))
        if rc != 0:
            raise RuntimeError("rmad %s exited %d:\n%s" % (self.name, rc, self.tail()))

    def kill(self):
        """SIGKILL, and clean up what the engine's shutdown would have."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree("/var/run/dpdk/onerma-" + self.name, ignore_errors=True)

    def tail(self, n=30):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def _memif_server_socket(vdev):
    if not vdev.startswith("net_memif"):
        return ""
    opts = dict(kv.split("=", 1) for kv in vdev.split(",")[1:] if "=" in kv)
    if opts.get("role") != "server" or opts.get("socket-abstract", "yes") != "no":
        return ""
    return opts.get("socket", "")


def loopback(dir, name, ip, extra=(), mode="backoff"):
    """An engine on a net_ring port whose tx comes back as its rx
    (testbed.Loopback): READs of its own regions go through it to itself.
    mode is its -poll-mode."""
    return Engine(dir, name, ip, "net_ring0", "net_ring0", extra, mode)


def memif_pair(dir, name_a, name_b, ip_a, ip_b, extra_a=(), extra_b=()):
    """Two engines on the two ends of a memif wire (testbed.MemifPair): A
    the server, B the client; start A first."""
    sock = os.path.join(dir, "%s-%s.memif" % (name_a, name_b))
    a = Engine(dir, name_a, ip_a, "net_memif0",
               "net_memif0,role=server,id=0,socket=%s,socket-abstract=no" % sock, extra_a)
    b = Engine(dir, name_b, ip_b, "net_memif0",
               "net_memif0,role=client,id=0,socket=%s,socket-abstract=no" % sock, extra_b)
    return a, b


class Proc:
    """A program driven by lines on its stdin and stdout (the C examples),
    as e2e's cProc drives them."""

    def __init__(self, args, env=None):
        self.args = args
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                  env=env, preexec_fn=_pdeathsig)

    def line(self, within=15.0):
        import select

        r, _, _ = select.select([self.p.stdout], [], [], within)
        if not r:
            raise AssertionError("%s printed nothing within %.0f s" % (os.path.basename(self.args[0]), within))
        l = self.p.stdout.readline()
        if not l:
            raise AssertionError("%s exited (%s)" % (os.path.basename(self.args[0]), self.p.poll()))
        return l.rstrip("\n")

    def ask(self, cmd, within=15.0):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.line(within).split()

    def close(self, within=10.0):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
                self.p.wait(within)
            except (subprocess.TimeoutExpired, BrokenPipeError):
                self.p.kill()
                self.p.wait()


def pattern(i):
    """The bytes the Go e2e owners and examples/c/owner.c fill regions with."""
    return (i * 167 + (i >> 9) + 3) & 0xFF


def patterned(off, n):
    return bytes(pattern(i) for i in range(off, off + n))
