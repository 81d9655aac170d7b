"""Fixtures of the tests: the package from the source tree, libonerma,
and real engines (tests/bed.py) where the host has them."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package, from the source tree
sys.path.insert(0, HERE)  # bed

import bed  # noqa: E402

import onerma  # noqa: E402
from onerma import _lib  # noqa: E402


def need(why):
    """Skip with why; in CI (CI=true) a test that cannot run fails."""
    if os.environ.get("CI") == "true":
        pytest.fail("required test cannot run in CI: " + why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def lib():
    try:
        return _lib.load()
    except _lib.LibraryNotFound as e:
        need(str(e))


@pytest.fixture(scope="session")
def keyx_lib(lib):
    if not lib.has_keyx:
        need("%s has no key exchange client (onerma_keyx_*)" % lib.path)
    return lib


def engines():
    why = bed.why_no_engines()
    if why:
        need(why)


@pytest.fixture(scope="session")
def tmp(tmp_path_factory):
    return str(tmp_path_factory.mktemp("onerma"))


@pytest.fixture(scope="module")
def loop(lib, tmp_path_factory):
    """One loopback engine for a module's tests: READs of its own regions
    go through it to itself."""
    engines()
    e = bed.loopback(str(tmp_path_factory.mktemp("loop")), "py-loop-%d" % (os.getpid() % 10000), "10.97.1.1").start()
    yield e
    e.stop()


@pytest.fixture
def portal(loop):
    """A portal on the loopback engine; the test ends with every slot free
    (every op it posted completed and was reaped)."""
    p = onerma.Portal(loop.socket, "pytest", slots=16)
    yield p
    try:
        if not p.closed and not p.gone:
            assert p.outstanding == 0, "ops left in flight"
            assert p.free_slots == p.slots
    finally:
        p.close()
