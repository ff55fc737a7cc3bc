#!/usr/bin/env bash
# Device check of the experimental Hopper wgmma attention forward, in one call: build for sm_90
# (the wgmma file for sm_90a), run the attention CUDA tests (the wgmma test against the CPU
# reference, and the existing kernels), the wgmma test under compute-sanitizer memcheck, and the
# benchmark with the mma.sync forward, the wgmma forward's two schedules and default, and PyTorch
# SDPA, then print one table (forward TFLOP/s; fwd+bwd for the default wgmma, mma.sync and SDPA).
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

timeout 300 "$BUILD/attnlab_tests" --gtest_filter='AttentionCuda.*' >"$LOGS/tests.log" 2>&1
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

timeout 120 "$BUILD/bench_attention" "$LOGS/mma.csv" --gpt2 --no-det --mma >"$LOGS/bench_mma.log" 2>&1
echo "bench mma.sync: rc=$?"
for v in simple pipelined; do
  timeout 120 "$BUILD/bench_attention" "$LOGS/wgmma_$v.csv" --gpt2 --no-det --wgmma=$v >"$LOGS/bench_$v.log" 2>&1
  echo "bench --wgmma=$v: rc=$?"
  tail -2 "$LOGS/bench_$v.log"
done
timeout 120 "$BUILD/bench_attention" "$LOGS/wgmma.csv" --gpt2 --no-det --wgmma >"$LOGS/bench_wgmma.log" 2>&1
echo "bench --wgmma (default schedules; fwd+bwd through the dispatcher): rc=$?"
PYTHONUNBUFFERED=1 timeout 180 python3 scripts/bench/sdpa_peer.py "$LOGS/peer.csv" --gpt2 >"$LOGS/peer.log" 2>&1
echo "sdpa peer: rc=$?"

echo "==== attention bf16 causal forward, TFLOP/s: mma.sync / wgmma simple, pipelined, default / SDPA ===="
python3 - "$LOGS" <<'PY'
import csv, os, sys
def rows(name):
    path = os.path.join(sys.argv[1], name)
    if not os.path.exists(path):
        return {}
    return {(r["D"], r["T"], r["B"], r["H"]): r for r in csv.DictReader(open(path))}
mma, sim, pip, dflt, peer = (rows(n) for n in
                             ("mma.csv", "wgmma_simple.csv", "wgmma_pipelined.csv", "wgmma.csv", "peer.csv"))
def tf(table, key, col="fwd_tflops"):
    return float(table[key][col]) if key in table else float("nan")
print(f"{'D':>4} {'T':>6} {'B':>3} {'H':>3} {'mma':>7} {'simple':>7} {'pipe':>7} {'default':>7} "
      f"{'sdpa':>7} {'best/sdpa':>9} {'f+b dflt':>8} {'f+b mma':>8} {'f+b sdpa':>8}")
for key in mma:
    m, s, p, d, q = (tf(t, key) for t in (mma, sim, pip, dflt, peer))
    best = max(x for x in (s, p, d) if x == x) if any(x == x for x in (s, p, d)) else float("nan")
    print(f"{key[0]:>4} {key[1]:>6} {key[2]:>3} {key[3]:>3} {m:7.1f} {s:7.1f} {p:7.1f} {d:7.1f} "
          f"{q:7.1f} {best / q:9.2f} {tf(dflt, key, 'fwdbwd_tflops'):8.1f} "
          f"{tf(mma, key, 'fwdbwd_tflops'):8.1f} {tf(peer, key, 'fwdbwd_tflops'):8.1f}")
PY
exit $tests_rc
