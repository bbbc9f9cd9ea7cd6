#!/usr/bin/env bash
# Time README's two set-up commands and the Python install as a newcomer meets them: a fresh
# clone of this repository's HEAD, an empty cargo cache (every crate downloaded and compiled), a
# new virtual environment, nothing else running. Prints each command's wall time and the size of
# target/ after them.
#   bash scripts/fresh_start.sh [WORKDIR]    (default: a new temporary directory)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
git clone -q "$repo" "$work/nnpc"
export CARGO_HOME="$work/cargo-home"
# The toolchain stays where rustup put it; only the registry cache and build outputs are new.
export RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
cd "$work/nnpc"
main_job() {
  cargo run --release -- emulate samples/lstm.nnp --batch 64 -o hw.safetensors \
    && cargo run --release -- diff samples/lstm.nnp --hardware hw.safetensors
}
t0=$(date +%s)
main_job > "$work/main_job.log" 2>&1
t1=$(date +%s)
cargo test --workspace --release > "$work/tests.log" 2>&1
t2=$(date +%s)
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -v ./python > "$work/pip.log" 2>&1
t3=$(date +%s)
"$work/venv/bin/python" -c "import nnpc; print('nnpc', nnpc.compile('samples/lstm.nnp') is not None)"
tail -1 "$work/main_job.log"
grep -E "^test result:" "$work/tests.log" | awk '{p+=$4; f+=$6} END {print p " passed, " f " failed"}'
echo "main job: $((t1 - t0)) s; tests: $((t2 - t1)) s; pip install ./python: $((t3 - t2)) s; all: $((t3 - t0)) s"
echo "target/: $(du -sh target | cut -f1)"
