#!/usr/bin/env bash
# The hard-routed Focus forward on the GPU machine, in one call: build, its GPU tests (with the
# soft-gated and dense ones), then benchmarks, each section's table printed as soon as it is
# measured (a call cut short by the device's time limit still reports what it ran), most
# important first: each pass order (FocusHardOrder; 12 x 64 and 8 x 128); the group passes' block
# orders (FocusHardBlockOrder); bench_focus_soft at 3 shapes, and with the hard gate
# (route_training: hard's forward+backward) at 2; Sinkhorn chunked vs cooperative; per-kernel
# times and stall reasons at 4K under ncu. Logs and CSVs in $OUT (the device tool's folder) or
# /tmp/attnlab_hard.
# Usage (repo root, on the GPU machine): bash scripts/focus_hard_check.sh [build_dir]
# Environment: HARD_T (lengths of the order section, default 1024,2048,4096,8192,16384), NCU=0
# skips ncu, BUILD=0 uses the binaries already in build_dir (built elsewhere for sm_90), TESTS=0
# skips the tests (a second call on a tree whose tests passed), SECTIONS picks the benchmark
# sections (a comma list of ab, order, blocks, soft, hardtrain, assign; all by default; ab runs
# only with BASE_BIN, a directory of another revision's binaries): a call is at most 600 s, so the
# first call (build, tests) may not reach the last. scripts/pack_device_binaries.sh builds the
# binaries here for BUILD=0 (and BASE_BIN's with BASE=<rev>).
# Then set the automatic order (src/ops/focus_hard.cpp) from the tables. Every step has a time
# limit (tests 240 s, each benchmark 90 s), so a hang costs one step, not the call.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
B=${1:-build-device}
O=${OUT:-/tmp/attnlab_hard}
mkdir -p "$O"
T=${HARD_T:-1024,2048,4096,8192,16384}
t0=$(date +%s)
elapsed() { echo "[$(($(date +%s) - t0)) s]"; }
# SECTIONS: a comma list of ab, order, blocks, soft, hardtrain, assign (default all).
want() { [[ ",${SECTIONS:-all}," == *",all,"* || ",${SECTIONS:-all}," == *",$1,"* ]]; }
if [ "${BUILD:-1}" = 1 ]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$O/cmake.log" 2>&1 ||
    { tail -20 "$O/cmake.log"; exit 1; }
  make -C "$B" -j16 attnlab_tests bench_focus_hard bench_focus_soft bench_focus_assign >"$O/build.log" 2>&1 ||
    { grep -E "error" -A3 "$O/build.log" | head -40; exit 1; }
  echo "build $(elapsed)"
fi
if [ "${TESTS:-1}" = 1 ]; then
  timeout 240 "$B/attnlab_tests" \
    --gtest_filter='FocusHard*:FocusCuda.*:FocusDecodeCuda.*:FocusModel*:FocusWgmma*:FocusSinkhorn*:AttentionCuda.*' \
    >"$O/tests.log" 2>&1
  echo "tests: rc=$? $(elapsed)"
  grep -E "^\[  FAILED|^\[  PASSED" "$O/tests.log" | head -20
fi

# bench_focus_hard's CSV columns: 3 T, 5 top_k, 6 groups, 7 dense, 8 hard (automatic), 9 its x
# dense, 12 list (--order/--blocks/--index apply), 13 its x dense, 14 sorted, 15 its x dense.
list_rows() {  # label csv
  [ -f "$2" ] && awk -F, -v o="$1" 'NR > 1 { printf "  %-20s T %6s top_k %s %-9s | dense %.3f list %.3f (%.2fx) sorted %.3f (%.2fx)\n", o, $3, $5, $6, $7, $12, $13, $14, $15 }' "$2"
}

# A/B: this tree's bench_focus_hard against BASE_BIN's (other revisions' binaries, e.g. from
# scripts/pack_device_binaries.sh with BASE=<rev>; a space-separated list of directories for
# several), alternating, twice each, in this process order; the list and sorted columns are the
# group passes under test. Rows are labelled by the directory's name ("new": this tree).
if [ -n "${BASE_BIN:-}" ] && want ab; then
  echo "A/B hard-routed forward (bases: $BASE_BIN; queued 20, ms):"
  for rep in 1 2; do
    for dir in $BASE_BIN "$B"; do
      side=$(basename "$dir")
      [ "$dir" = "$B" ] && side=new
      for args in "--D=64 --top_k=1,2 --T=1024,2048,4096,8192" "--D=128 --H=8 --top_k=1 --T=4096,16384"; do
        # shellcheck disable=SC2086
        timeout 90 "$dir/bench_focus_hard" $args --K=8 --groups=balanced --no-mma --queued=20 \
          --csv="$O/ab.csv" >"$O/ab.log" 2>&1
        list_rows "$side D${args:4:3}" "$O/ab.csv"
      done
    done
  done
  echo "$(elapsed)"
fi

if want order; then
echo "hard-routed forward by pass order, K 8, top_k 1, queued 20 (ms; x dense):"
for order in automatic group_first band_first fused fused_ws; do
  timeout 90 "$B/bench_focus_hard" --D=64 --K=8 --top_k=1 --groups=balanced --no-mma --T="$T" \
    --order=$order --queued=20 --csv="$O/hard64_$order.csv" >"$O/hard64_$order.log" 2>&1
  timeout 90 "$B/bench_focus_hard" --D=128 --H=8 --K=8 --top_k=1 --groups=balanced --no-mma \
    --T=4096,16384 --order=$order --queued=20 --csv="$O/hard128_$order.csv" \
    >"$O/hard128_$order.log" 2>&1
  for f in "$O/hard64_$order.csv" "$O/hard128_$order.csv"; do
    [ -f "$f" ] && awk -F, -v o=$order 'NR > 1 { printf "  %-11s D %3s T %6s | dense %.3f hard %.3f (%.2fx) list %.3f (%.2fx) sorted %.3f (%.2fx)\n", o, $1, $3, $7, $8, $9, $12, $13, $14, $15 }' "$f"
  done
done
echo "$(elapsed)"
fi

# The group passes' block order (FocusHardBlockOrder; list and sorted columns): balanced and
# realistic groups, top_k 1 and 2.
if want blocks; then
echo "group passes by block order, 12 x 64, K 8, queued 20 (ms; x dense):"
for blocks in longest_first group_major; do
  f="$O/blocks64_$blocks.csv"
  timeout 90 "$B/bench_focus_hard" --D=64 --K=8 --top_k=1,2 --groups=balanced,realistic --no-mma \
    --T=2048,4096,8192 --blocks=$blocks --queued=20 --csv="$f" >"$O/blocks64_$blocks.log" 2>&1
  list_rows "$blocks" "$f"
done
echo "$(elapsed)"
fi

# The soft-gated kernels and dense beside them, batch 1 (the block order of docs/performance.md
# changed both; compare with docs/performance_variants.md's figures).
soft_rows() {  # label gate shape...: bench_focus_soft per shape, its table rows
  local label=$1 gate=$2
  shift 2
  for shape in "$@"; do
    timeout 120 "$B/bench_focus_soft" "$O/${label}_${shape/:/_}.csv" --gate=$gate --shape=$shape \
      >"$O/${label}_${shape/:/_}.log" 2>&1
    tail -n +2 "$O/${label}_${shape/:/_}.log" 2>/dev/null | head -6 | sed 's/^/  /'
  done
  echo "$(elapsed)"
}
if want soft; then
  echo "soft-gated (wgmma) and dense, batch 1 (bench_focus_soft; ms):"
  soft_rows soft additive 64:4096 64:16384 128:4096
fi

# route_training: hard: the hard-routed forward plus the tiled backward ("tiled f+b") or the
# wgmma kernel's hard-gate backward ("wgmma f+b", automatic's choice on sm_90a).
if want hardtrain; then
  echo "hard-gate training (bench_focus_soft --gate=hard; ms):"
  soft_rows hardtrain hard 64:4096 64:16384
fi

# The routing: Sinkhorn chunked (one launch per step) against cooperative (one per direction), B 1
# (inference at batch 1) and B 64 (a training micro-batch), K 8, T 1K .. 64K.
if want assign; then
echo "Sinkhorn, chunked vs cooperative (bench_focus_assign; ms):"
for b in 1 64; do
  timeout 90 "$B/bench_focus_assign" --B=$b --max-t=65536 --csv="$O/assign_b$b.csv" \
    >"$O/assign_b$b.log" 2>&1
  [ -f "$O/assign_b$b.csv" ] && awk -F, -v b=$b '$1 ~ /sinkhorn/ && $3 == 8 { printf "  B %2s %-18s %-8s T %6s %9.4f\n", b, $1, $2, $4, $5 }' "$O/assign_b$b.csv"
done
echo "$(elapsed)"
fi

if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  M="gpu__time_duration.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active"
  M="$M,smsp__issue_active.avg.pct_of_peak_sustained_active"
  M="$M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
  timeout 300 ncu --clock-control none --cache-control none --metrics "$M" \
    -k regex:"band_kernel|sorted_group|focus_hard_wgmma_kernel|hard_index|attn_fwd_wgmma|gather" \
    "$B/bench_focus_hard" --D=64 --K=8 --top_k=1 --groups=balanced --no-mma --T=4096 --reps=1 \
    >"$O/ncu.log" 2>&1
  python3 - "$O/ncu.log" <<'PY'
import collections, re, sys
rows, name = collections.OrderedDict(), None
for line in open(sys.argv[1]):
    if ')x(' in line and 'Context' in line:
        m = re.search(r'(\w+)(?:<[^()]*>)?\(', line)
        name = m.group(1) if m else '?'
        rows.setdefault(name, collections.defaultdict(list))
        continue
    m = re.match(r'\s+(\S+)\s+(\S+)?\s+([\d.,]+)\s*$', line)
    if m and name:
        rows[name][m.group(1)].append(float(m.group(3).replace(',', '')))
print("ncu at 4K, 12 x 64 (median over launches; stall cycles per issued instruction):")
for k, d in rows.items():
    med = lambda v: sorted(v)[len(v) // 2]
    t = med(d.get('gpu__time_duration.sum', [0]))
    st = sorted(((med(v), n.replace('smsp__average_warps_issue_stalled_', '').replace(
        '_per_issue_active.ratio', '')) for n, v in d.items() if 'stalled' in n), reverse=True)
    print(f"  {k[:28]:28s} {t:10.1f} (duration unit as ncu printed) | " +
          ", ".join(f"{n} {v:.1f}" for v, n in st[:5]))
PY
  echo "$(elapsed)"
fi
