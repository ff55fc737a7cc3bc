#!/usr/bin/env bash
# Nsight Compute profile of attention shapes on the GPU machine: our wgmma backward and forward
# kernels (bench_attention --shape) and PyTorch SDPA's backward at the same shape (sdpa_peer.py
# --shape), each kernel's first launch. Prints SDPA's kernel names and times, then for each profiled
# kernel the speed-of-light, pipe, warp-stall and scheduler lines. Into $OUT (or /tmp/ncu_attention):
# the backward details pages (ours and SDPA), and for ours the per-instruction stall samples (SASS, csv, gzipped).
# Usage (repo root, bench_attention built): bash scripts/ncu_attention.sh BUILD_DIR [D:T ...]
#   (default 128:4096). ncu needs --clock-control none on the device machine (the device tool's METHOD.md).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
BUILD=${1:?build dir}
shift
SHAPES=${*:-128:4096}
LOGS=${OUT:-/tmp/ncu_attention}
mkdir -p "$LOGS"
NCU="ncu --clock-control none"
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
  --section MemoryWorkloadAnalysis_Tables
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
summary() {  # the lines worth reading from a details page
  grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|\
L2 Cache Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Eligible Warps Per Scheduler|\
Warp Cycles Per Issued|Registers Per Thread|Block Limit Shared|Mem Busy|Max Bandwidth|\
Mem Pipes Busy|Shared Memory|Bank Conflicts|Tensor" "$1"
  grep -E "^    (OPT|INF|WRN)" "$1" | cut -c1-300 | head -6
}
for shape in $SHAPES; do
  tag=${shape/:/_}
  echo "== SDPA kernels at D:T = $shape (name, time) =="
  $NCU --metrics gpu__time_duration.sum -c 8 python3 scripts/bench/sdpa_peer.py "--shape=$shape" \
    >"/tmp/sdpa_list_$tag.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|gpu__time_duration" "/tmp/sdpa_list_$tag.txt" | cut -c1-160
  echo "== sdpa bwd $shape =="
  $NCU $SECTIONS -k "regex:(?i)bwd|backward|bprop" -c 1 python3 scripts/bench/sdpa_peer.py \
    "--shape=$shape" >"$LOGS/sdpa_bwd_$tag.txt" 2>&1
  summary "$LOGS/sdpa_bwd_$tag.txt"
  echo "== ours bwd $shape =="
  $NCU $SECTIONS --section SourceCounters --import-source no -o "/tmp/ours_bwd_$tag" -f \
    -k "regex:attn_bwd_wgmma_kernel" -c 1 "$BUILD/bench_attention" "--shape=$shape" --no-det \
    >/dev/null 2>&1
  ncu -i "/tmp/ours_bwd_$tag.ncu-rep" --print-details all >"$LOGS/ours_bwd_$tag.txt" 2>&1
  summary "$LOGS/ours_bwd_$tag.txt"
  ncu -i "/tmp/ours_bwd_$tag.ncu-rep" --page source --csv --print-source sass 2>/dev/null |
    gzip >"$LOGS/ours_bwd_sass_$tag.csv.gz"
  echo "== ours fwd $shape =="
  $NCU $SECTIONS -k "regex:attn_fwd_wgmma" -c 1 "$BUILD/bench_attention" "--shape=$shape" \
    --no-det >"/tmp/ours_fwd_$tag.txt" 2>&1
  summary "/tmp/ours_fwd_$tag.txt"
done
