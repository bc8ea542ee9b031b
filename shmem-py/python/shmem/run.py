"""``python -m shmem.run -n 4 script.py [args]``: start PEs of a Python script.

The same launcher as the ``shmemrun`` binary (it hosts the job's config
store, gives each PE the ``SHMEM_*`` and torchrun variables, stops the job
and names the PE when one fails), running ``sys.executable script.py`` (or
``sys.executable -m module`` with ``-m module``). In the script,
``shmem.init()`` / ``shmem.core.init()`` joins the job.
"""

import argparse
import sys

from . import _shmem as _n


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m shmem.run",
        description="Start N PEs of a Python script on this machine.",
    )
    ap.add_argument("-n", "-np", "--np", dest="n", type=int, required=True, help="number of PEs")
    ap.add_argument("--engine", help="SHMEM_TEST_ENGINE for every PE (HCCS, SDMA)")
    ap.add_argument("--tag-output", action="store_true", help="prefix output lines with [PE i]")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="extra environment variable")
    ap.add_argument("--timeout", type=float, help="stop the job after this many seconds (exit 124)")
    ap.add_argument("-m", dest="module", help="run a module (like python -m) instead of a script")
    ap.add_argument("script", nargs="?", help="the Python script")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    a = ap.parse_args(argv)
    if a.module:
        prog_args = ["-m", a.module] + ([a.script] if a.script else []) + a.args
    elif a.script:
        prog_args = [a.script] + a.args
    else:
        ap.error("a script (or -m module) is required")
    env = []
    for kv in a.env:
        k, sep, v = kv.partition("=")
        if not sep:
            ap.error(f"--env {kv!r}: expected K=V")
        env.append((k, v))
    code, summary = _n.launch(a.n, sys.executable, prog_args, a.engine, a.tag_output, env, a.timeout)
    if summary:
        print(summary, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
