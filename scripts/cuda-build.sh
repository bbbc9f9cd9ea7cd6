#!/usr/bin/env bash
# Builds nnpc with the `cuda` feature (the whole software graph on a CUDA GPU, through candle's
# CUDA backend) on a machine with no CUDA toolkit, and with or without a GPU. Never part of CI.
#
#   scripts/cuda-build.sh                                  target/cuda/release/nnpc
#   scripts/cuda-build.sh test --no-run -p nnp-exec --lib  any cargo command and arguments
#
# candle compiles its kernels with nvcc at build time and links CUDA's libraries. This script
# installs CUDA 13.0's compiler, headers and runtime from PyPI (NVIDIA's wheels) into
# target/cuda-toolkit, and gives the linker stand-ins for the libraries that come with the
# driver or are large (libcuda, libnvrtc, libcublas, libcublasLt, libcurand): they carry the
# functions' names and the real libraries' sonames, so the binary loads the real ones on the GPU
# machine. CUDA 13.0 matches the 580 driver's PTX version; CUDA_COMPUTE_CAP (default 90, Hopper)
# picks the GPU generation candle's precompiled kernels are built for.
#
# Running the binary needs the driver and, on LD_LIBRARY_PATH, CUDA 13's libcudart, libnvrtc,
# libcublas, libcublasLt and libcurand (PyTorch's CUDA 13 wheels carry them; docs/swgraph.md,
# "The graph on a GPU").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kit=$root/target/cuda-toolkit
mkdir -p "$kit"

if [ ! -x "$kit/venv/bin/nvcc-ready" ]; then
  python3 -m venv "$kit/venv"
  "$kit/venv/bin/python" -m pip install -q --disable-pip-version-check \
    "nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-crt==13.0.88" \
    "nvidia-nvvm==13.0.88" "nvidia-cuda-cccl==13.0.85"
  touch "$kit/venv/bin/nvcc-ready"
fi
cu=$(echo "$kit"/venv/lib/python3*/site-packages/nvidia/cu13)
[ -x "$cu/bin/nvcc" ] || { echo "error: no nvcc under $cu" >&2; exit 1; }

# The stand-in libraries, from the function names cudarc declares.
stubs=$cu/lib/stubs
if [ ! -e "$stubs/libcuda.so" ]; then
  mkdir -p "$stubs"
  cudarc=$(cd "$root" && cargo metadata --format-version 1 --features nnp-exec/cuda |
    python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "cudarc").rsplit("/", 1)[0])')
  for spec in cuda:driver:libcuda.so.1 nvrtc:nvrtc:libnvrtc.so.13 cublas:cublas:libcublas.so.13 \
    cublasLt:cublaslt:libcublasLt.so.13 curand:curand:libcurand.so.10; do
    IFS=: read -r name dir soname <<<"$spec"
    grep -rhoE 'pub unsafe fn [A-Za-z0-9_]+' "$cudarc/src/$dir/sys" | sort -u |
      sed -E 's/pub unsafe fn (.*)/void \1(void) {}/' >"$stubs/$name.c"
    cc -shared -fPIC -Wl,-soname,"$soname" -o "$stubs/lib$name.so" "$stubs/$name.c"
  done
  ln -sf ../libcudart.so.13 "$stubs/libcudart.so"
fi

export PATH=$cu/bin:$PATH CUDA_ROOT=$cu CUDARC_CUDA_VERSION=13000
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/cuda}
cd "$root"
[ $# -gt 0 ] || set -- build --bin nnpc
cmd=$1
shift
exec cargo "$cmd" --release --features cuda "$@"
