#!/usr/bin/env bash
# Device check of the Hopper wgmma attention kernels (forward and backward), in one call: build for
# sm_90 (the wgmma files for sm_90a), run the attention CUDA tests (the wgmma test against the CPU
# reference: the forward, the mma.sync backward on its o and lse, the wgmma backward through the
# dispatcher and called directly; the ops with GQA and windows), the benchmark with the default
# kernels, with --mma (both mma.sync kernels), PyTorch SDPA, then a table (TFLOP/s), and last the
# wgmma test under compute-sanitizer memcheck with the time that is left.
# Usage (repo root, on the GPU machine): bash scripts/wgmma_check.sh [build_dir]
#   SANITIZE=0 skips memcheck, SKIP_MMA=1 the --mma benchmark, SKIP_PEER=1 PyTorch SDPA; TESTS is
#   the gtest filter (default AttentionCuda.*); BUDGET (seconds, default 250) bounds the whole
#   script: each step's timeout is cut to what is left. Logs and CSVs go to $OUT (the device tool's folder) or /tmp/wgmma.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
BUILD=${1:-build-device}
LOGS=${OUT:-/tmp/wgmma}
BUDGET=${BUDGET:-250}
mkdir -p "$LOGS"
t0=$(date +%s)
# Seconds for a step: its own cap, cut to the budget left (at least 1).
left() {
  local rest=$((BUDGET - ($(date +%s) - t0)))
  ((rest < $1)) && echo $((rest > 1 ? rest : 1)) || echo "$1"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$LOGS/cmake.log" 2>&1 \
  || { tail -30 "$LOGS/cmake.log"; exit 1; }
grep "wgmma attention" "$LOGS/cmake.log"
timeout "$(left 200)" make -C "$BUILD" -j16 attnlab_tests bench_attention >"$LOGS/build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$LOGS/build.log" | head -60; exit 1; }
echo "build: $(($(date +%s) - t0)) s"

# Line-buffered, so that a test killed by its timeout (a hung kernel) still shows how far it got.
LINEBUF=$(command -v stdbuf >/dev/null && echo "stdbuf -oL")
timeout "$(left 90)" $LINEBUF "$BUILD/attnlab_tests" --gtest_filter="${TESTS:-AttentionCuda.*}" \
  >"$LOGS/tests.log" 2>&1
tests_rc=$?
echo "==== AttentionCuda tests: rc=$tests_rc ($(($(date +%s) - t0)) s) ===="
((tests_rc == 124)) && echo "  timed out; last lines:" && tail -3 "$LOGS/tests.log"
grep -E "^\[       OK \]|^\[  FAILED  \]|^\[  SKIPPED \]|Failure|Expected|Which is|Skipped|skip" \
  "$LOGS/tests.log" | head -30
echo "  wgmma backward, max rel error per shape (dq / dk / dv):"
grep "\[cuda-err\] attention bf16/wgmma bwd " "$LOGS/tests.log" |
  awk '{k = $5; for (i = 6; i <= NF - 2; ++i) k = k " " $i; v[k] = v[k] " " $(NF - 1) "=" $NF}
       END {for (k in v) printf "    %-36s%s\n", k, v[k]}' | sort
echo "  worst over all shapes, per kernel and output:"
grep "\[cuda-err\] attention bf16/wgmma" "$LOGS/tests.log" |
  awk '{k = $4 " " $(NF - 1); e = $NF + 0; if (e > m[k]) m[k] = e}
       END {for (k in m) printf "    %-20s %.2e\n", k, m[k]}' | sort

timeout "$(left 60)" "$BUILD/bench_attention" "$LOGS/wgmma.csv" --gpt2 --no-det >"$LOGS/bench_wgmma.log" 2>&1
bench_rc=$?
echo "bench (default kernels): rc=$bench_rc ($(($(date +%s) - t0)) s)"
cat "$LOGS/bench_wgmma.log"
if [ "${SKIP_MMA:-0}" != 1 ]; then
  timeout "$(left 60)" "$BUILD/bench_attention" "$LOGS/mma.csv" --gpt2 --no-det --mma >"$LOGS/bench_mma.log" 2>&1
  echo "bench --mma: rc=$?"
fi
if [ "${SKIP_PEER:-0}" != 1 ]; then
  PYTHONUNBUFFERED=1 timeout "$(left 90)" python3 scripts/bench/sdpa_peer.py "$LOGS/peer.csv" --gpt2 \
    >"$LOGS/peer.log" 2>&1
  echo "sdpa peer: rc=$? ($(($(date +%s) - t0)) s)"
fi

echo "==== attention bf16 causal, TFLOP/s (f+b counts bwd as 2.5x fwd); bwd ms ===="
python3 - "$LOGS" <<'PY'
import csv, os, sys
def rows(name):
    path = os.path.join(sys.argv[1], name)
    if not os.path.exists(path):
        return {}
    return {(r["D"], r["T"], r["B"], r["H"]): r for r in csv.DictReader(open(path))}
wg, mma, peer = rows("wgmma.csv"), rows("mma.csv"), rows("peer.csv")
def v(table, key, col):
    try:
        return float(table[key][col])
    except (KeyError, ValueError):
        return float("nan")
print(f"{'D':>4} {'T':>6} {'B':>3} {'H':>3} {'fwd':>6} {'fwd sd':>6} {'f+b':>6} {'f+b mma':>7} "
      f"{'f+b sd':>6} {'f+b/sd':>6} | bwd ms: {'dflt':>6} {'mma':>6} {'sdpa':>6} | {'delta':>6}")
for key in wg or mma:
    fb, fbs = v(wg, key, "fwdbwd_tflops"), v(peer, key, "fwdbwd_tflops")
    print(f"{key[0]:>4} {key[1]:>6} {key[2]:>3} {key[3]:>3} {v(wg, key, 'fwd_tflops'):6.1f} "
          f"{v(peer, key, 'fwd_tflops'):6.1f} {fb:6.1f} {v(mma, key, 'fwdbwd_tflops'):7.1f} "
          f"{fbs:6.1f} {fb / fbs:6.2f} |         {v(wg, key, 'bwd_ms'):6.2f} "
          f"{v(mma, key, 'bwd_ms'):6.2f} {v(peer, key, 'fwdbwd_ms') - v(peer, key, 'fwd_ms'):6.2f} |"
          f" {v(wg, key, 'delta_ms'):6.3f}")
PY

if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  timeout "$(left 150)" compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/attnlab_tests" \
    --gtest_filter='AttentionCuda.Wgmma*' >"$LOGS/memcheck.log" 2>&1
  echo "memcheck (wgmma test): rc=$? $(grep -E 'ERROR SUMMARY' "$LOGS/memcheck.log" | tail -1)" \
    "($(($(date +%s) - t0)) s)"
  grep -m5 -E "Invalid|Misaligned|out of bounds|FAILED" "$LOGS/memcheck.log"
fi
exit $tests_rc
