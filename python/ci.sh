#!/usr/bin/env bash
# Build, install and test the Python package `nnpc` (python/), as CI does (.ci/run calls this).
# Needs a Rust toolchain and Python >= 3.9 with venv. The environment (torch's wheels and their
# CUDA libraries are about 5 GB) is kept between runs in NNPC_PY_ENV, by default
# ~/.cache/nnpc/py-env: a second run installs only the package itself.
set -euo pipefail
cd "$(dirname "$0")/.."

# One target directory with the workspace: the release artifacts of its crates are reused.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

# The command line the tests compare the package's bits and reports with.
cargo build --release --locked --bin nnpc

ENV_DIR="${NNPC_PY_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/nnpc/py-env}"
[ -x "$ENV_DIR/bin/python" ] || python3 -m venv "$ENV_DIR"
PY="$ENV_DIR/bin/python"
# The venv's tools (maturin, which the build below calls) first on the path.
export PATH="$ENV_DIR/bin:$PATH"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q "maturin>=1.7,<2" pytest numpy "ray[data]" pyarrow hypothesis ml_dtypes \
  torch safetensors
"$PY" -m pip install -q --no-build-isolation "./python[ray,torch]"

echo "== python tests (python/tests: the API against the CLI, a Ray campaign)"
"$PY" -m pytest -q python/tests
