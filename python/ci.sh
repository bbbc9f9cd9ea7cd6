#!/usr/bin/env bash
# Build, install and test the Python package `nnpc` (python/), as CI does (.ci/run calls this).
# Needs a Rust toolchain and Python >= 3.9 with venv; installs into python/.venv-py.
set -euo pipefail
cd "$(dirname "$0")/.."

# One target directory with the workspace: the release artifacts of its crates are reused.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

# The command line the tests compare the package's bits and reports with.
cargo build --release --locked --bin nnpc

python3 -m venv python/.venv-py
PY=python/.venv-py/bin/python
# The venv's tools (maturin, which the build below calls) first on the path.
export PATH="$PWD/python/.venv-py/bin:$PATH"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q "maturin>=1.7,<2" pytest numpy "ray[data]" pyarrow hypothesis ml_dtypes
# torch is optional: its test runs where `import torch` works (a CPU wheel is enough).
"$PY" -m pip install -q --no-build-isolation "./python[ray]"

echo "== python tests (python/tests: the API against the CLI, a Ray campaign)"
"$PY" -m pytest -q python/tests
