#!/usr/bin/env bash
# Every test of the project: the Rust workspace (unit, multi-process,
# multi-host and C ABI tests) and the Python package's pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# The C ABI tests link C programs against libshmem (a cdylib, which
# `cargo test` does not build) and launch them with shmemrun; the Python
# plugin test loads the example plugin engine's .so.
cargo build -p shmem-capi -p shmem-launch -p shmem-plugin-example
cargo test --workspace

# The Python package, installed into a private virtual environment.
venv=target/pytest-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# torch (the default wheel, which runs on CPU) so that the torch tests
# (torch.library ops, torch.compile, torchrun) run instead of skipping;
# installed once, reused afterwards.
"$venv/bin/python" -m pip install --quiet ./shmem-py pytest numpy torch
# The venv's console scripts (shmemrun, torchrun) come first on PATH.
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/python" -m pytest -q shmem-py/tests
