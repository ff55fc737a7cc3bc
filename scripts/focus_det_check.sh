#!/usr/bin/env bash
# Device check of Focus's deterministic backward (docs/focus_soft.md, "The deterministic
# backward"): its GPU tests, the Focus GPU test set, the soft-gate benchmark with the fast and the
# deterministic backward (and BASE_BIN's bench_focus_soft, an older build, as the fast path's
# baseline), and training end to end: a small Focus GPT (bf16, head dim 64, the wgmma kernels)
# trained twice with train.deterministic true, once resumed from its step-15 checkpoint, and
# twice with false; the per-step losses and gradient norms of steps 16-30 (metrics.jsonl, full
# precision) must be identical across the deterministic runs and the resume.
# Usage (repo root, on the GPU machine): bash scripts/focus_det_check.sh [build_dir]
#   BUILD=0: use the binaries in build_dir as they are (scripts/pack_device_binaries.sh), else
#   build attnlab, attnlab_tests and bench_focus_soft there first (Release, sm_90 + sm_90a).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
B=${1:-build-device}
export ATTNLAB_SOURCE_DIR=$PWD ATTNLAB_BINARY=$PWD/$B/attnlab
if [ "${BUILD:-1}" = 1 ]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/tmp/fdc_cmake.log 2>&1 &&
    make -C "$B" -j16 attnlab attnlab_tests bench_focus_soft >/tmp/fdc_build.log 2>&1 ||
    { grep -E "error" -A3 /tmp/fdc_build.log | head -40; exit 1; }
fi
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
fail=0

echo "== tests"
timeout 300 "$B"/attnlab_tests --gtest_filter='FocusWgmmaCuda.Deterministic*:FocusModelCuda.*:FocusWgmmaDet.*' \
  >/tmp/fdc_det.log 2>&1 || fail=1
grep -E "^\[       OK|FAILED|PASSED|Failure|wgmma det\]|Expected|Which is" /tmp/fdc_det.log | head -40
timeout 400 "$B"/attnlab_tests \
  --gtest_filter='Focus*Cuda*:GPTCuda.*Focus*:-FocusSinkhornCuda.MatchesTheReference1M:FocusWgmmaCuda.Deterministic*:FocusModelCuda.*' \
  >/tmp/fdc_set.log 2>&1 || fail=1
grep -E "^\[  PASSED|^\[  FAILED|tests ran" /tmp/fdc_set.log

echo "== bench_focus_soft (ms; fast and deterministic backward)"
for s in 64:4096 64:16384 128:4096; do
  [ -n "${BASE_BIN:-}" ] && echo "$s base $("$BASE_BIN"/bench_focus_soft --shape=$s | tail -1)"
  echo "$s fast $("$B"/bench_focus_soft --shape=$s | tail -1)"
  echo "$s det  $("$B"/bench_focus_soft --shape=$s --deterministic | tail -1)"
done

echo "== training end to end"
R=(recipes/quickstart-focus.yaml --set train.device=cuda --set train.precision=bf16
  --set model.n_embd=256 --set model.n_head=4 --set model.block_size=1024 --set train.seq_len=1024
  --set train.micro_batch=8 --set train.batch_tokens=16384 --set train.steps=30
  --set schedule.warmup_steps=5 --set eval.every=15 --set checkpoint.every=15
  --set checkpoint.keep_last=5 --set log.every=1)
run() {  # name deterministic [extra args]
  local name=$1 det=$2
  shift 2
  rm -rf "/tmp/fdc_$name"
  timeout 150 "$B"/attnlab train "${R[@]}" --set train.deterministic="$det" \
    --set train.out_dir="/tmp/fdc_$name" "$@" >"/tmp/fdc_$name.log" 2>&1
  echo "$name: rc $? | $(grep -E '^done' "/tmp/fdc_$name.log")"
}
run det1 true
run det2 true
run detr true --resume /tmp/fdc_det1/checkpoints/step_00000015
run fast1 false
run fast2 false
if grep -q "train.deterministic is true, but" /tmp/fdc_det1.log; then
  echo "det1 printed the determinism warning: the deterministic form did not run"
  fail=1
fi
steps() {  # grad_norm, loss and step of steps 16-30, full precision
  grep -oE '"grad_norm":[0-9.e-]+,"loss":[0-9.e-]+,.*"step":[0-9]+' "$1/metrics.jsonl" |
    sed -E 's/,"lr.*"step":/ step /' | awk '$NF > 15'
}
for pair in det1:det2 det1:detr fast1:fast2; do
  a=/tmp/fdc_${pair%%:*} b=/tmp/fdc_${pair##*:}
  n=$(steps "$b" | wc -l)
  if [ "$n" = 15 ] && diff <(steps "$a") <(steps "$b") >/dev/null; then
    echo "$pair: steps 16-30 identical"
  else
    echo "$pair: differ ($n steps)"
    case $pair in fast*) ;; *) fail=1 ;; esac
  fi
done
date -u
exit $fail
