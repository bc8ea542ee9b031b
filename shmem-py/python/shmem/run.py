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


SHMEMRUN_USAGE = """usage: shmemrun -n N [--engine HCCS|SDMA|ROCE] [--tag-output] [--env K=V]... PROGRAM [ARGS...]

Starts N PEs of PROGRAM on this machine (the Python package's copy of the
`shmemrun` launcher: the same options and the same launch code as the Rust
binary). PROGRAM `python`/`python3` runs this interpreter (the one that
has shmem installed).

  -n, -np, --np N    number of PEs
  --engine E         set SHMEM_TEST_ENGINE=E for every PE
  --tag-output       prefix every output line with [PE i]
  --env K=V          extra environment variable for every PE
  --timeout SECS     stop the whole job after SECS seconds (exit 124)
  --bind-to core|none  one core per PE when they fit (default core; SHMEM_BIND=none)
  --nnodes K         the job spans K nodes, each running shmemrun with -n N
  --node-rank R      this node's index (its PEs get ranks R*N .. R*N+N-1)
  --master-addr A    node 0's address; its shmemrun hosts the store on port P+1
  --master-port P    torch's MASTER_PORT on node 0 (default 29500)
  -h, --help         this text"""


class _Usage(Exception):
    pass


def _parse_shmemrun(argv):
    opts = {"n": None, "engine": None, "tag": False, "env": [], "timeout": None, "bind": None,
            "nnodes": 1, "node_rank": 0, "master_addr": None, "master_port": 29500}
    it = iter(argv)

    def value(name):
        try:
            return next(it)
        except StopIteration:
            raise _Usage(f"{name} needs a value") from None

    def number(name, text, kind=int):
        try:
            return kind(text)
        except ValueError:
            raise _Usage(f"{name} {text!r}: not a number") from None

    for a in it:
        if a in ("-h", "--help"):
            return None
        if a in ("-n", "-np", "--np"):
            n = number(a, value(a))
            if n < 1:
                raise _Usage(f"{a} {n}: the number of PEs must be at least 1")
            opts["n"] = n
        elif a == "--engine":
            opts["engine"] = value(a)
        elif a == "--tag-output":
            opts["tag"] = True
        elif a == "--bind-to":
            v = value(a)
            if v not in ("core", "none"):
                raise _Usage(f"--bind-to {v!r}: expected core or none")
            opts["bind"] = v == "core"
        elif a == "--nnodes":
            opts["nnodes"] = number(a, value(a))
        elif a == "--node-rank":
            opts["node_rank"] = number(a, value(a))
        elif a == "--master-addr":
            opts["master_addr"] = value(a)
        elif a == "--master-port":
            p = number(a, value(a))
            if not 0 < p < 65536:
                raise _Usage(f"--master-port {p}: not a port")
            opts["master_port"] = p
        elif a == "--timeout":
            t = number(a, value(a), float)
            if not t > 0:
                raise _Usage(f"--timeout {t}: must be positive")
            opts["timeout"] = t
        elif a == "--env":
            kv = value(a)
            k, sep, v = kv.partition("=")
            if not sep:
                raise _Usage(f"--env {kv!r}: expected K=V")
            opts["env"].append((k, v))
        elif a.startswith("-") and len(a) > 1:
            raise _Usage(f"unknown option {a}")
        else:
            opts["program"] = a
            opts["args"] = list(it)
            break
    else:
        raise _Usage("missing PROGRAM")
    if opts["n"] is None:
        raise _Usage("missing -n N")
    return opts


def shmemrun_main(argv=None):
    """The ``shmemrun`` console script."""
    import os

    argv = sys.argv[1:] if argv is None else argv
    try:
        o = _parse_shmemrun(argv)
    except _Usage as e:
        print(f"shmemrun: {e}\n\n{SHMEMRUN_USAGE}", file=sys.stderr)
        return 2
    if o is None:
        print(SHMEMRUN_USAGE)
        return 0
    program = o["program"]
    if os.path.basename(program) in ("python", "python3") and os.sep not in program:
        program = sys.executable
    master = (o["master_addr"], o["master_port"]) if o["master_addr"] else None
    try:
        code, summary = _n.launch(o["n"], program, o["args"], o["engine"], o["tag"], o["env"],
                                  o["timeout"], o["bind"], o["nnodes"], o["node_rank"], master)
    except Exception as e:  # noqa: BLE001 - reported like the binary does
        print(f"shmemrun: {e}", file=sys.stderr)
        return 1
    if summary:
        print(summary, file=sys.stderr)
    return code


def _shmemrun_entry():
    sys.exit(shmemrun_main())
