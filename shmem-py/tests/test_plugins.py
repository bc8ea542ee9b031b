"""A transport engine loaded at run time: the example plugin
(examples/plugin-engine, a cdylib) forced with SHMEM_TEST_ENGINE under the
Python package, running the RMA, atomic and signal scenarios of the other
test files."""

import os
import pathlib
import subprocess

import pytest

from pes import run_pes
from test_rma import atomics, put_get
from test_signals import signalled_ring

REPO = pathlib.Path(__file__).resolve().parents[2]
PLUGIN = REPO / "target" / "debug" / "libshmem_plugin_example.so"


@pytest.fixture(scope="module")
def plugin_env():
    # A no-op when scripts/test-all.sh has built it already.
    subprocess.run(
        ["cargo", "build", "-p", "shmem-plugin-example"], cwd=REPO, check=True, timeout=900
    )
    assert PLUGIN.exists(), PLUGIN
    return {"SHMEM_TRANSPORT_PLUGINS": str(PLUGIN), "SHMEM_TEST_ENGINE": "MEMCPY"}


@pytest.mark.parametrize("fn,n", [(put_get, 2), (atomics, 3), (signalled_ring, 3)])
def test_scenarios_on_the_plugin_engine(plugin_env, fn, n):
    assert run_pes(fn, n, env=plugin_env) == [True] * n


def route(rank, n):
    import shmem.core as core

    core.barrier_all()
    return os.environ["SHMEM_TEST_ENGINE"]


def test_forcing_the_engine_without_its_plugin_fails(plugin_env):
    with pytest.raises(AssertionError, match="MEMCPY"):
        run_pes(route, 2, env={"SHMEM_TEST_ENGINE": "MEMCPY"}, timeout=30)
