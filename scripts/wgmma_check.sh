#!/usr/bin/env bash
# Device check of the experimental Hopper wgmma attention forward, in one call: build for sm_90
# (the wgmma file for sm_90a), run the attention CUDA tests (the wgmma test against the CPU
# reference, and the existing kernels), the wgmma test under compute-sanitizer memcheck, and the
# forward benchmark with the mma.sync kernel, with --wgmma and PyTorch SDPA, then print a table.
# Usage (repo root, on the GPU machine): bash scripts/wgmma_check.sh [build_dir]
#   SANITIZE=0 skips memcheck; logs and CSVs go to $OUT (the device tool's folder) or /tmp/wgmma.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
BUILD=${1:-build-device}
LOGS=${OUT:-/tmp/wgmma}
mkdir -p "$LOGS"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader

t0=$(date +%s)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$LOGS/cmake.log" 2>&1 \
  || { tail -30 "$LOGS/cmake.log"; exit 1; }
grep "wgmma attention forward" "$LOGS/cmake.log"
make -C "$BUILD" -j16 attnlab_tests bench_attention >"$LOGS/build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$LOGS/build.log" | head -60; exit 1; }
echo "build: $(($(date +%s) - t0)) s"

"$BUILD/attnlab_tests" --gtest_filter='AttentionCuda.*' >"$LOGS/tests.log" 2>&1
tests_rc=$?
echo "==== AttentionCuda tests: rc=$tests_rc ===="
grep -E "^\[       OK \]|^\[  FAILED  \]|^\[  SKIPPED \]|Failure|Expected|Which is|Skipped|skip" \
  "$LOGS/tests.log" | head -40
echo "  wgmma max rel error per shape (o / lse / dq / dk / dv after the wgmma forward):"
grep "\[cuda-err\] attention bf16/wgmma" "$LOGS/tests.log" |
  awk '{k = $4; for (i = 5; i <= NF - 2; ++i) k = k " " $i; v[k] = v[k] " " $(NF - 1) "=" $NF}
       END {for (k in v) printf "    %-40s%s\n", k, v[k]}' | sort
grep "\[cuda-err\] attention bf16/wgmma" "$LOGS/tests.log" |
  awk '{e = $NF + 0; if (e > m) m = e} END {printf "  worst over all shapes and outputs: %.2e\n", m}'

if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/attnlab_tests" \
    --gtest_filter='AttentionCuda.Wgmma*' >"$LOGS/memcheck.log" 2>&1
  echo "memcheck (wgmma test): rc=$? $(grep -E 'ERROR SUMMARY' "$LOGS/memcheck.log" | tail -1)"
  grep -m5 -E "Invalid|Misaligned|out of bounds" "$LOGS/memcheck.log"
fi

"$BUILD/bench_attention" "$LOGS/mma.csv" --gpt2 --no-det >"$LOGS/bench_mma.log" 2>&1
echo "bench mma.sync: rc=$?"
"$BUILD/bench_attention" "$LOGS/wgmma.csv" --gpt2 --no-det --wgmma >"$LOGS/bench_wgmma.log" 2>&1
echo "bench --wgmma: rc=$?"
tail -3 "$LOGS/bench_wgmma.log"
PYTHONUNBUFFERED=1 python3 scripts/bench/sdpa_peer.py "$LOGS/peer.csv" --gpt2 >"$LOGS/peer.log" 2>&1
echo "sdpa peer: rc=$?"

echo "==== attention bf16 forward, TFLOP/s: mma.sync / wgmma / PyTorch SDPA ===="
python3 - "$LOGS/mma.csv" "$LOGS/wgmma.csv" "$LOGS/peer.csv" <<'PY'
import csv, os, sys
def rows(path):
    if not os.path.exists(path):
        return {}
    return {(r["D"], r["T"], r["B"], r["H"]): r for r in csv.DictReader(open(path))}
mma, wg, peer = (rows(p) for p in sys.argv[1:4])
print(f"{'D':>4} {'T':>6} {'B':>3} {'H':>3} {'mma.sync':>9} {'wgmma':>9} {'sdpa':>9} "
      f"{'wg/mma':>7} {'wg/sdpa':>8} {'f+b wg':>8} {'f+b sdpa':>9}")
for key, m in mma.items():
    w, p = wg.get(key), peer.get(key)
    fm = float(m["fwd_tflops"])
    fw = float(w["fwd_tflops"]) if w else float("nan")
    fp = float(p["fwd_tflops"]) if p else float("nan")
    bw = float(w["fwdbwd_tflops"]) if w else float("nan")
    bp = float(p["fwdbwd_tflops"]) if p else float("nan")
    print(f"{key[0]:>4} {key[1]:>6} {key[2]:>3} {key[3]:>3} {fm:9.1f} {fw:9.1f} {fp:9.1f} "
          f"{fw / fm:7.2f} {fw / fp:8.2f} {bw:8.1f} {bp:9.1f}")
PY
exit $tests_rc
