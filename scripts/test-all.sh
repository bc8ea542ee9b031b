#!/usr/bin/env bash
# Every test of the project: the Rust workspace (unit, multi-process,
# multi-host and C ABI tests) and the Python package's pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace
