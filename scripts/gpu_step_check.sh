#!/usr/bin/env bash
# One command for the GPU training step (issue 3): builds, runs the whole-step GPU test, the
# external PyTorch oracle (logits/loss/grads + 10 AdamW steps), bench_train and the PyTorch peer
# (eager and torch.compile) in the same run, and prints one table with ratios ours / peer.
#
#   scripts/gpu_step_check.sh [build-dir]        (on a CUDA machine with PyTorch; ~5 minutes cold)
# Environment: BATCH (default 64), STEPS (bench steps, 10), SKIP_BUILD=1, OUT (log dir, default $BUILD/gpu_step),
# PRECS (oracle precisions, default "bf16 fp32"), PEER_MODES (PyTorch peers, default "eager,compile").
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
OUTDIR="${OUT:-$BUILD/gpu_step}"
BATCH="${BATCH:-64}"
STEPS="${STEPS:-10}"
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
status=0

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUTDIR/cmake.log" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" --target attnlab_tests gpt2_step_dump bench_train >"$OUTDIR/build.log" 2>&1 ||
    { tail -40 "$OUTDIR/build.log"; echo "build failed"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUTDIR/gpu.txt"

echo "== 1. whole training step, GPU vs CPU (tests/cuda/test_gpt_cuda.cpp) =="
"$BUILD/attnlab_tests" --gtest_filter='GPTCuda*:GPTRecompute*' 2>&1 | tee "$OUTDIR/test_gpt_cuda.log" | grep -v '^\[ *RUN\|^    h\.' || true
grep -q '^\[  PASSED  \]' "$OUTDIR/test_gpt_cuda.log" && ! grep -q FAILED "$OUTDIR/test_gpt_cuda.log" && t1=PASS || { t1=FAIL; status=1; }

echo "== 2. PyTorch oracle: GPT-2 124M, B=4, T=1024, 10 AdamW steps (scripts/torch_gpt2_check.py) =="
TOK="$OUTDIR/batches.i32"
python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50257, size=(10, 4, 1025), dtype=np.int32).tofile('$TOK')"
SETS=(--set train.steps=10 --set schedule.warmup_steps=3)
HP='{"lr":6e-4,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.1,"grad_clip":1.0}'
# bf16 (the product's training precision) and fp32 (must agree with the fp32 oracle to ~1e-6).
# The weights after step 5 are dumped so the check can show which tensors' updates differ.
t2=PASS
for prec in ${PRECS:-bf16 fp32}; do
  echo "-- attnlab $prec vs PyTorch --"
  "$BUILD/gpt2_step_dump" --recipe "$ROOT/recipes/gpt2-124m-dense.yaml" "${SETS[@]}" --set train.precision=$prec \
    --tokens "$TOK" --batch 4 --seq 1024 --init-out "$OUTDIR/init_$prec" --train-steps 10 --weights-after 5 \
    --out "$OUTDIR/dump_$prec.safetensors" 2>&1 | tee "$OUTDIR/dump_$prec.log"
  python3 "$ROOT/scripts/torch_gpt2_check.py" --dump "$OUTDIR/dump_$prec.safetensors" \
    --model "$OUTDIR/init_$prec/model.safetensors" --tokens "$TOK" --batch 4 --seq 1024 --hp "$HP" 2>&1 |
    grep -v '^  torch ' | tee "$OUTDIR/torch_check_$prec.log"
  grep -q 'TORCH CHECK: PASS' "$OUTDIR/torch_check_$prec.log" || { t2=FAIL; status=1; }
done

echo "== 3. bench_train (GPT-2 124M, T=1024, random data) =="
"$BUILD/bench_train" --batch "$BATCH,32,16" --steps "$STEPS" 2>&1 | tee "$OUTDIR/bench_train.log"
echo "== 4. PyTorch peer (eager, torch.compile) =="
MB=$(sed -n 's/^RESULT bench_train mb=\([0-9]*\).*/\1/p' "$OUTDIR/bench_train.log" | head -1)
python3 "$ROOT/scripts/bench/torch_train_peer.py" --batch "${MB:-$BATCH}" --steps "$STEPS" \
  --modes "${PEER_MODES:-eager,compile}" 2>&1 | tee "$OUTDIR/torch_peer.log"

val() { sed -n "s/^RESULT $1.*$2=\([0-9.]*\).*/\1/p" "$3" | head -1; }
ours=$(val bench_train tok_s "$OUTDIR/bench_train.log"); ours_mem=$(val bench_train mem_gib "$OUTDIR/bench_train.log")
ours_ms=$(val bench_train ms "$OUTDIR/bench_train.log"); mfu=$(val bench_train mfu "$OUTDIR/bench_train.log")
eager=$(val 'torch_peer mode=eager' tok_s "$OUTDIR/torch_peer.log"); eager_mem=$(val 'torch_peer mode=eager' mem_gib "$OUTDIR/torch_peer.log")
comp=$(val 'torch_peer mode=compile' tok_s "$OUTDIR/torch_peer.log"); comp_mem=$(val 'torch_peer mode=compile' mem_gib "$OUTDIR/torch_peer.log")
ratio() { python3 -c "import sys; a,b=sys.argv[1:]; print(f'{float(a)/float(b):.2f}x' if a and b else 'n/a')" "${1:-}" "${2:-}"; }
echo
echo "================ GPU training step: summary ================"
printf '%-44s %s\n' "GPU step test (fp32 + bf16 vs CPU)" "$t1" "PyTorch oracle bf16+fp32 (logits, loss, grads, 10 steps)" "$t2"
printf '%-22s %12s %10s %10s %16s\n' "GPT-2 124M, mb ${MB:-?}" "tok/s" "ms/step" "mem GiB" "ours / this"
printf '%-22s %12s %10s %10s %16s\n' "attnlab" "${ours:-n/a}" "${ours_ms:-n/a}" "${ours_mem:-n/a}" "MFU ${mfu:-n/a}"
printf '%-22s %12s %10s %10s %16s\n' "torch eager" "${eager:-n/a}" "" "${eager_mem:-n/a}" "$(ratio "$ours" "$eager")"
printf '%-22s %12s %10s %10s %16s\n' "torch.compile" "${comp:-n/a}" "" "${comp_mem:-n/a}" "$(ratio "$ours" "$comp")"
echo "(attnlab memory: device memory in use (cudaMemGetInfo); torch: max_memory_allocated)"
exit $status
