#!/usr/bin/env bash
# Device check: build for Hopper, run the whole test suite (CPU and CUDA tests), the attention
# benchmark and its PyTorch SDPA peer, and print a short table at the end.
# Usage (repo root, on the GPU machine): bash scripts/device_check.sh [build_dir]
# Environment: GTEST_FILTER (tests to run; default all), TEST_SHARDS (parallel gtest shards, 8),
# TEST_TIMEOUT (s per shard, 600), SANITIZE=1 (memcheck of the attention,
# embedding and cross-entropy tests; SANITIZE_FILTER narrows them, SANITIZE_TIMEOUT in s, 300), SKIP_TRAIN=1, SKIP_BENCH=1, SKIP_STEP=1 (no gpu_step_check.sh), BENCH_ARGS (bench_attention
# options, default --gpt2), PRECS / PEER_MODES (passed to scripts/gpu_step_check.sh), PREPARE_MB
# with ATTNLAB_SHARED_DATA (also runs scripts/prepare_scaling.sh on that many MB of text, at
# PREPARE_THREADS threads, default "1 4 16"),
# BASE_SRC (an older source tree, e.g. `git archive <commit>` in an ignored, carried folder: built
# beside this one from the start, then scripts/ab_step_check.sh compares step time, attention time
# and generation of the two builds in this call).
# VARIANTS=1 also runs the Focus and SFA benchmarks (bench_focus_soft, bench_focus_hard at 12 x 64
# and 8 x 128, bench_focus_decode, bench_focus_assign (B 1, and B 64 at T 1K), bench_sfa;
# docs/performance_variants.md has the full sweeps) and prints their tables; HARD_T and SFA_T set
# their lengths (defaults 1024,4096,16384,65536 and 4096,16384); VARIANTS_PEERS=1 adds
# focus_peer.py --quick and sfa_peer.py --quick, and scripts/attention_oracle_check.sh (Focus and
# SFA through a whole GPT-2 against the independent PyTorch oracle: CPU, CUDA fp32 and bf16).
# LLAMA=1 runs scripts/hf_llama_check.py (LlamaForCausalLM / MistralForCausalLM in transformers as
# the oracle of the LLaMA block) and scripts/llama_step_check.sh (the 124M and 1B steps beside
# their PyTorch peers).
# Logs and CSVs go to $OUT (the device tool's folder) or /tmp/attnlab_device.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=${1:-build-device}
LOGS=${OUT:-/tmp/attnlab_device}
mkdir -p "$LOGS"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$LOGS/gpu.txt"

t0=$(date +%s)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$LOGS/cmake.log" 2>&1 \
  || { tail -30 "$LOGS/cmake.log"; exit 1; }
if [ -n "${BASE_SRC:-}" ]; then
  (cmake -S "$BASE_SRC" -B "$BASE_SRC/build-device" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNLAB_BUILD_TESTS=OFF &&
    make -C "$BASE_SRC/build-device" -j8 attnlab bench_train bench_attention) >"$LOGS/base_build.log" 2>&1 &
  base_pid=$!
fi
VARIANT_BENCHES=""
[ "${VARIANTS:-0}" = 1 ] && VARIANT_BENCHES="bench_focus_soft bench_focus_hard bench_focus_decode bench_focus_assign bench_sfa"
make -C "$BUILD" -j16 attnlab attnlab_tests bench_attention bench_train gpt2_step_dump $VARIANT_BENCHES \
  >"$LOGS/build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$LOGS/build.log" | head -60; exit 1; }
t1=$(date +%s)
echo "build: $((t1 - t0)) s"

# The suite in TEST_SHARDS gtest shards at once (default 8; the GPU is shared, the CPU tests take
# OMP_NUM_THREADS 2 each), the 1M Sinkhorn case (> 120 s alone) in a process of its own (with
# the default filter only); the shards'
# logs then make tests.log. A shard past TEST_TIMEOUT s (default 600) fails.
shards=${TEST_SHARDS:-8}
filter=${GTEST_FILTER:-*}
sink1m=FocusSinkhornCuda.MatchesTheReference1M
# The shards leave the 1M case out (a filter with negative patterns gets it added to them); it
# runs on its own only where the filter is the default (all tests).
case "$filter" in
  *-*) shard_filter="$filter:$sink1m" ;;
  *) shard_filter="$filter:-$sink1m" ;;
esac
pids=""
for ((i = 0; i < shards; i++)); do
  OMP_NUM_THREADS=2 GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${TEST_TIMEOUT:-600}" \
    "$BUILD/attnlab_tests" --gtest_filter="$shard_filter" >"$LOGS/tests_shard$i.log" 2>&1 &
  pids="$pids $!"
done
: >"$LOGS/tests_sink1m.log"
if [ "$filter" = "*" ]; then
  timeout "${TEST_TIMEOUT:-600}" "$BUILD/attnlab_tests" \
    --gtest_filter="$sink1m" >"$LOGS/tests_sink1m.log" 2>&1 &
  pids="$pids $!"
fi
tests_rc=0
for pid in $pids; do wait "$pid" || tests_rc=1; done
cat "$LOGS"/tests_shard*.log "$LOGS/tests_sink1m.log" >"$LOGS/tests.log"
t2=$(date +%s)
echo "tests: rc=$tests_rc, $((t2 - t1)) s"
grep -E "^\[  FAILED  \]|Failure|Expected|Which is|error" "$LOGS/tests.log" | head -40

if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  # Out-of-bounds / misaligned accesses in the attention kernels (small shapes are enough).
  timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$BUILD/attnlab_tests" \
    --gtest_filter="${SANITIZE_FILTER:-AttentionCuda.*:EmbeddingCuda.*:CrossEntropyCuda.*}" \
    >"$LOGS/memcheck.log" 2>&1
  echo "memcheck: rc=$? ($(grep -c 'Invalid' "$LOGS/memcheck.log") invalid accesses)"
  grep -E "ERROR SUMMARY" "$LOGS/memcheck.log" | tail -1
fi

# The real trainer on the GPT-2 124M recipe (synthetic tokens: no dataset on the device), a few
# optimizer steps of 524K tokens, through the CLI a user runs.
if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  timeout 240 "$BUILD/attnlab" train recipes/gpt2-124m-dense.yaml --set data.source=synthetic \
    --set data.synthetic.vocab_size=50257 --set data.synthetic.train_tokens=8000000 \
    --set data.synthetic.val_tokens=300000 --set train.steps=6 --set schedule.warmup_steps=2 \
    --set eval.every=0 --set eval.batches=2 --set checkpoint.at_end=false \
    --set train.out_dir="$LOGS/gpt2_run" >"$LOGS/gpt2_train.log" 2>&1
  echo "gpt2-124m trainer run: rc=$?"; tail -4 "$LOGS/gpt2_train.log"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  "$BUILD/bench_attention" "$LOGS/ours.csv" ${BENCH_ARGS:---gpt2} 2>&1 | tee "$LOGS/bench.log"
  PYTHONUNBUFFERED=1 python3 scripts/bench/sdpa_peer.py "$LOGS/peer.csv" --gpt2 2>&1 | tee -a "$LOGS/bench.log"
fi
# The whole training step: GPU vs CPU test, PyTorch oracle, bench_train vs torch eager/compile.
if [ "${SKIP_STEP:-0}" != 1 ]; then
  SKIP_BUILD=1 OUT="$LOGS/step" bash scripts/gpu_step_check.sh "$BUILD" >"$LOGS/step.log" 2>&1
  step_rc=$?
fi

if [ "${VARIANTS:-0}" = 1 ]; then
  timeout 240 "$BUILD/bench_focus_soft" "$LOGS/focus_soft.csv" >"$LOGS/bench_focus_soft.log" 2>&1
  timeout 150 "$BUILD/bench_focus_hard" --csv="$LOGS/focus_hard.csv" --D=64 --K=8 --top_k=1,2 \
    --T="${HARD_T:-1024,4096,16384,65536}" >"$LOGS/bench_focus_hard.log" 2>&1
  timeout 90 "$BUILD/bench_focus_hard" --csv="$LOGS/focus_hard_128.csv" --D=128 --H=8 --K=8 \
    --top_k=1,2 --T=4096,16384,65536 >>"$LOGS/bench_focus_hard.log" 2>&1
  timeout 60 "$BUILD/bench_focus_decode" --csv="$LOGS/focus_decode.csv" >"$LOGS/bench_focus_decode.log" 2>&1
  timeout 60 "$BUILD/bench_focus_assign" --csv="$LOGS/focus_assign.csv" --max-t=65536 \
    >"$LOGS/bench_focus_assign.log" 2>&1
  # ... and at GPT-2 124M's training shape (B 64 x 1024), where the routing costs the most.
  timeout 60 "$BUILD/bench_focus_assign" --csv="$LOGS/focus_assign_b64.csv" --B=64 --max-t=1024 \
    >>"$LOGS/bench_focus_assign.log" 2>&1
  timeout 150 "$BUILD/bench_sfa" --csv="$LOGS/sfa.csv" --T="${SFA_T:-4096,16384}" >"$LOGS/bench_sfa.log" 2>&1
  if [ "${VARIANTS_PEERS:-0}" = 1 ]; then
    timeout 150 env PYTHONUNBUFFERED=1 python3 scripts/bench/focus_peer.py --quick \
      --csv "$LOGS/focus_peer.csv" >"$LOGS/focus_peer.log" 2>&1
    timeout 120 env PYTHONUNBUFFERED=1 python3 scripts/bench/sfa_peer.py --quick \
      --csv "$LOGS/sfa_peer.csv" >"$LOGS/sfa_peer.log" 2>&1
    OUT="$LOGS/attention_oracle" timeout 300 bash scripts/attention_oracle_check.sh "$BUILD" \
      >"$LOGS/attention_oracle.log" 2>&1
  fi
fi

# The LLaMA block (docs/llama.md): transformers as the oracle of LlamaForCausalLM /
# MistralForCausalLM checkpoints, and the 124M step of both blocks.
if [ "${LLAMA:-0}" = 1 ]; then
  timeout 200 python3 scripts/hf_llama_check.py --build "$BUILD" >"$LOGS/hf_llama.log" 2>&1
  OUT="$LOGS/llama_step" bash scripts/llama_step_check.sh "$BUILD" >"$LOGS/llama_step.log" 2>&1
fi

if [ -n "${BASE_SRC:-}" ]; then
  wait "$base_pid" || { echo "base build failed"; tail -20 "$LOGS/base_build.log"; }
  OUT="$LOGS" bash scripts/ab_step_check.sh "$BASE_SRC" "$BUILD" >"$LOGS/ab.log" 2>&1
fi

if [ -n "${PREPARE_MB:-}" ] && [ -n "${ATTNLAB_SHARED_DATA:-}" ]; then
  timeout 200 bash scripts/prepare_scaling.sh "$BUILD/attnlab" "$PREPARE_MB" ${PREPARE_THREADS:-1 4 16} \
    >"$LOGS/prepare_scaling.log" 2>&1
  echo "prepare_scaling: rc=$?"
fi

echo
echo "==== correctness (max rel error, CUDA vs CPU reference) ===="
# One line per op and precision: the worst error over its shapes and outputs.
grep "\[cuda-err\]" "$LOGS/tests.log" | awk '{k = $2 " " $3; e = $NF + 0; if (!(k in m) || e > m[k]) m[k] = e}
  END {for (k in m) printf "  %-24s worst %.2e\n", k, m[k]}' | sort
echo "  attention, per shape (o / dq / dk / dv):"
# The shape is every field up to w=...; the output's name (o, lse, dq, ...) follows it.
grep "\[cuda-err\] attention" "$LOGS/tests.log" | awk '{k = ""; part = ""; seen = 0
  for (i = 3; i < NF; i++) { if (seen) { part = part $i; continue }; k = k " " $i; if ($i ~ /^w=/) seen = 1 }
  v[k] = v[k] " " part "=" $NF} END {for (k in v) printf "   %-40s%s\n", k, v[k]}' | sort
for f in "$LOGS"/tests_shard*.log "$LOGS/tests_sink1m.log"; do
  echo "  $(basename "$f" .log): $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+|^\[  SKIPPED \] [0-9]+' "$f" |
    tr '\n' ' ')"
done
if [ -f "$LOGS/ours.csv" ] && [ -f "$LOGS/peer.csv" ]; then
  echo "==== attention bf16 causal, TFLOP/s (ours / PyTorch SDPA) ===="
  python3 - "$LOGS/ours.csv" "$LOGS/peer.csv" <<'PY'
import csv, sys
ours = {(r["D"], r["T"], r["B"]): r for r in csv.DictReader(open(sys.argv[1]))}
peer = {(r["D"], r["T"], r["B"]): r for r in csv.DictReader(open(sys.argv[2]))}
print(f"{'D':>4} {'T':>6} {'B':>3} {'fwd ours':>9} {'fwd sdpa':>9} {'ratio':>6} {'f+b ours':>9} {'f+b sdpa':>9} {'ratio':>6}")
for key, o in ours.items():
    p = peer.get(key)
    if not p:
        continue
    fo, fp = float(o["fwd_tflops"]), float(p["fwd_tflops"])
    bo, bp = float(o["fwdbwd_tflops"]), float(p["fwdbwd_tflops"])
    print(f"{key[0]:>4} {key[1]:>6} {key[2]:>3} {fo:9.1f} {fp:9.1f} {fo/fp:6.2f} {bo:9.1f} {bp:9.1f} {bo/bp:6.2f}")
PY
fi
if [ -f "$LOGS/step.log" ]; then
  sed -n '/=== GPU training step: summary ===/,$p' "$LOGS/step.log"
  grep -E "adamw step|after step 1|grad norm cpu" "$LOGS/step/test_gpt_cuda.log" 2>/dev/null | head -30
  echo "gpu_step_check rc=${step_rc:-?}"
fi
if [ -f "$LOGS/prepare_scaling.log" ]; then
  echo "==== prepare scaling (scripts/prepare_scaling.sh) ===="
  cat "$LOGS/prepare_scaling.log"
fi
if [ -f "$LOGS/ab.log" ]; then
  echo "==== old build ($BASE_SRC) vs this one (scripts/ab_step_check.sh) ===="
  grep -v "^$" "$LOGS/ab.log"
fi
if [ -f "$LOGS/hf_llama.log" ]; then
  echo "==== LLaMA block: transformers oracle, training step vs PyTorch (docs/llama.md) ===="
  grep -E "^(PASS|FAIL)" "$LOGS/hf_llama.log"
  sed -n '/==== LLaMA step/,$p' "$LOGS/llama_step.log"
fi
if [ "${VARIANTS:-0}" = 1 ]; then
  for b in bench_focus_soft bench_focus_hard bench_focus_decode bench_focus_assign bench_sfa focus_peer sfa_peer \
    attention_oracle; do
    [ -f "$LOGS/$b.log" ] || continue
    echo "==== $b (docs/performance_variants.md) ===="
    grep -vE "^W[0-9]{4} |InputBuffer|TensorBox|DeprecationWarning|create_block_mask" "$LOGS/$b.log" | tail -30
  done
fi
exit $tests_rc
