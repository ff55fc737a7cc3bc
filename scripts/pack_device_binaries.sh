#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries on this (CPU) machine and packs them for a device
# call, so the call spends no device time building (the device tool's 30 minutes are the scarce
# resource; a device build of these takes minutes of it). Same flags as a device build
# (Release, CMAKE_CUDA_ARCHITECTURES 90: sm_90 plus the sm_90a wgmma objects). The binaries link
# this machine's libyaml-cpp, which the device lacks (it has another soname), so the library
# goes in the pack too.
# Usage (repo root): scripts/pack_device_binaries.sh [out_dir] [build_dir]
#   out_dir (default .prebuilt, git-ignored there): bin.tar.xz, the yaml-cpp library, and with
#   BASE=<git rev> base.tar.xz, the same binaries built from that revision (a worktree in
#   /tmp) for an A/B in the same call; BASE="<rev> <rev2> ..." packs base.tar.xz, base2.tar.xz,
#   ... (one per revision, in that order).
# Environment: TARGETS (default: attnlab, attnlab_tests, the Focus benchmarks and bench_train);
#   BASE_TARGETS, the bases' targets (default TARGETS; e.g. bench_focus_hard alone keeps the
#   carry small).
# On the device (carry out_dir):
#   mkdir -p build-device && tar -C build-device -xJf .prebuilt/bin.tar.xz
#   export LD_LIBRARY_PATH=$PWD/.prebuilt ATTNLAB_SOURCE_DIR=$PWD \
#     ATTNLAB_BINARY=$PWD/build-device/attnlab   (the tests' source tree and CLI, tests/test_util.h)
#   BUILD=0 bash scripts/focus_hard_check.sh build-device   (BASE_BIN=build-base: A/B section;
#   with several bases, unpack base2.tar.xz into build-base2 ... and BASE_BIN="build-base build-base2")
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.prebuilt}
build=${2:-build-pack}
targets=${TARGETS:-attnlab attnlab_tests bench_focus_hard bench_focus_soft bench_focus_assign bench_train}
mkdir -p "$out"

pack() {  # src_dir build_dir tarball targets...
  local src=$1 dir=$2 tarball=$3
  shift 3
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake --build "$dir" -j"$(nproc)" --target "$@" >/dev/null
  (cd "$dir" && tar -cJf - "$@") >"$tarball"
  echo "packed $tarball ($(du -h "$tarball" | cut -f1)): $*"
}
# shellcheck disable=SC2086
pack . "$build" "$out/bin.tar.xz" $targets
n=1
for rev in ${BASE:-}; do
  wt=/tmp/attnlab-pack-base
  rm -rf "$wt"
  git worktree prune
  git worktree add -q --detach "$wt" "$rev"
  name=base; [ $n -gt 1 ] && name=base$n
  # shellcheck disable=SC2086
  pack "$wt" "$wt/build-pack" "$out/$name.tar.xz" ${BASE_TARGETS:-$targets}
  echo "  ($name = $(git rev-parse --short "$rev"))"
  git worktree remove --force "$wt"
  n=$((n + 1))
done
# The yaml-cpp library every packed binary links (attnlab always is one).
lib=$(ldd "$build/attnlab" | awk '/libyaml-cpp/ { print $3 }')
cp -L "$lib" "$out/"
echo "with $(basename "$lib"); carry $out (limit 64 MiB: $(du -sh "$out" | cut -f1))"
