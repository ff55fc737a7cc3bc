#!/usr/bin/env bash
# Installs what attnlab needs and is missing on a Debian/Ubuntu machine, then configures the build.
# The CUDA toolkit (nvcc, cuBLAS; NCCL optional) is assumed present: it is detected, not installed.
# OpenMPI (openmpi-bin, libopenmpi-dev) is installed for the mpi backend and the multi-rank tests
# (docs/distributed.md); NCCL and MPI are both optional to the build, which says what it found.
# Usage: scripts/setup.sh [build-dir]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}

# --- CUDA toolkit ---------------------------------------------------------------------------
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    if [ -x "$d/nvcc" ]; then export PATH="$d:$PATH"; break; fi
  done
fi
if ! command -v nvcc >/dev/null 2>&1; then
  echo "setup: the CUDA toolkit was not found (no nvcc on PATH or in /usr/local/cuda*/bin)." >&2
  echo "setup: install the CUDA toolkit (12.4 or newer, with cuBLAS and NCCL) and re-run." >&2
  exit 1
fi
cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")

# --- distribution packages ------------------------------------------------------------------
need=(cmake g++ make pkg-config libyaml-cpp-dev libcli11-dev libgtest-dev nlohmann-json3-dev
      zlib1g-dev liblzma-dev xz-utils ccache openmpi-bin libopenmpi-dev)
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${need[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
else
  echo "setup: not a Debian/Ubuntu machine; make sure these are installed: ${need[*]}" >&2
fi

if [ ! -e "$cuda_root/include/nccl.h" ] && [ ! -e /usr/include/nccl.h ]; then
  echo "setup: NCCL headers not found (looked in $cuda_root/include and /usr/include);" >&2
  echo "setup: building without the nccl backend (multi-GPU data parallelism); install NCCL" >&2
  echo "setup: (libnccl-dev) for your CUDA version and re-run to have it." >&2
fi

# --- configure ------------------------------------------------------------------------------
log=$(mktemp)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" >"$log" \
  || { cat "$log"; rm -f "$log"; exit 1; }
echo "setup: configured $build_dir (CUDA at $cuda_root)"
grep -E "attnlab: (NCCL backend|no MPI)" "$log" | sed 's/^-- /setup: /' || true
rm -f "$log"
