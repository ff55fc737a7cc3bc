#!/usr/bin/env bash
# attnlab's Focus and SFA against an independent PyTorch implementation of their equations
# (scripts/torch_attention_check.py), through a whole GPT-2. Per variant a small model is trained
# (CPU, 150 steps of recipes/quickstart-focus.yaml / quickstart-sfa.yaml with head dim 64 and
# T 256; Focus with a 32-token band, so the groups are learned and most pairs are distant), then
# for every option gpt2_step_dump writes the evaluation forward (loss, logits; Focus: hard
# routing by default) and the training forward and backward (loss, every gradient: W_g and C,
# SFA's with its distillation term), and the oracle recomputes them in float64 with a tolerance
# from a same-precision reference.
#
#   scripts/attention_oracle_check.sh [build-dir]   (needs PyTorch; CUDA rows where a GPU is present)
# Environment: OUT (work dir, default $BUILD/attention_oracle), DEVICES (default "cpu cuda-fp32
# cuda-bf16", the CUDA ones skipped without a GPU), VARIANTS_ONLY ("focus" or "sfa"),
# FOCUS_CHECKPOINT / SFA_CHECKPOINT (a run's checkpoint dir of the same shape instead of training).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
OUTDIR="${OUT:-$BUILD/attention_oracle}"
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
B=2 T=256 W=32

# name | gpt2_step_dump --set | oracle options | devices (empty: all)
FOCUS_VARIANTS=(
  "default|||"
  "multiplicative|--set attention.focus.gate=multiplicative|--gate multiplicative|"
  "sequence-scope|--set attention.focus.sinkhorn_scope=sequence|--scope sequence|"
  "softmax-assign|--set attention.focus.assign=softmax|--assign softmax|"
  "hard-training|--set attention.focus.route_training=hard|--route-training hard|"
  "soft-eval|--set attention.focus.eval_routing=soft|--eval-routing soft|"
  "top_k-1|--set attention.focus.top_k=1|--top-k 1|"
)
SFA_VARIANTS=(
  "k-8|--set attention.sfa.k=8|--sfa-k 8|"
  "k-3|--set attention.sfa.k=3|--sfa-k 3|"
  "distill|--set attention.sfa.k=8 --set attention.sfa.distill=0.5|--sfa-k 8 --distill 0.5|"
  "flash|--set attention.sfa.k=8 --set attention.sfa.kernel=flash|--sfa-k 8|cpu cuda-bf16"
)

# Trains the variant's model unless a checkpoint is given; prints its checkpoint directory.
model_for() {  # variant recipe given_checkpoint
  local dir="$OUTDIR/run_$1"
  if [ -n "$3" ]; then echo "$3"; return; fi
  if [ -f "$dir/checkpoints/latest" ]; then  # trained by an earlier call into the same OUT
    echo "$dir/checkpoints/$(cat "$dir/checkpoints/latest")"; return
  fi
  local sets=(--set model.n_head=2 --set model.block_size=$T --set train.seq_len=$T)
  [ "$1" = focus ] && sets+=(--set attention.focus.local_window=$W)
  "$BUILD/attnlab" train "$ROOT/recipes/$2" "${sets[@]}" --set train.micro_batch=4 \
    --set train.steps=150 --set train.device=cpu --set eval.every=0 --set train.out_dir="$dir" \
    >"$OUTDIR/train_$1.log" 2>&1 || { tail -20 "$OUTDIR/train_$1.log" >&2; return 1; }
  tail -1 "$OUTDIR/train_$1.log" >&2
  echo "$dir/checkpoints/$(cat "$dir/checkpoints/latest")"
}

python3 - "$OUTDIR/tokens.i32" $B $T <<'EOF'
import random, struct, sys
random.seed(7)
path, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "wb") as f:
    f.write(struct.pack(f"<{B * (T + 1)}i", *[random.randrange(512) for _ in range(B * (T + 1))]))
EOF
has_gpu=0
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && has_gpu=1
status=0
summary=()
for variant in ${VARIANTS_ONLY:-focus sfa}; do
  case $variant in
    focus) ckpt=$(model_for focus quickstart-focus.yaml "${FOCUS_CHECKPOINT:-}") || exit 1
      cases=("${FOCUS_VARIANTS[@]}"); common=(--attention focus --local-window $W) ;;
    sfa) ckpt=$(model_for sfa quickstart-sfa.yaml "${SFA_CHECKPOINT:-}") || exit 1
      cases=("${SFA_VARIANTS[@]}"); common=(--attention sfa) ;;
    *) echo "unknown variant $variant"; exit 2 ;;
  esac
  for dev in ${DEVICES:-cpu cuda-fp32 cuda-bf16}; do
    case $dev in
      cpu) dset=(--set train.device=cpu) ;;
      cuda-fp32) dset=(--set train.device=cuda --set train.precision=fp32) ;;
      cuda-bf16) dset=(--set train.device=cuda --set train.precision=bf16) ;;
      *) echo "unknown device $dev"; exit 2 ;;
    esac
    if [ "$dev" != cpu ] && [ $has_gpu = 0 ]; then summary+=("$variant $dev: skipped (no GPU)"); continue; fi
    for c in "${cases[@]}"; do
      IFS='|' read -r name sets opts devs <<<"$c"
      [ -z "$devs" ] || [[ " $devs " == *" $dev "* ]] || continue
      tag="${variant}_${dev}_$name"
      # shellcheck disable=SC2086
      if ! "$BUILD/gpt2_step_dump" --recipe "$ckpt/recipe.yaml" --checkpoint "$ckpt" \
        --tokens "$OUTDIR/tokens.i32" --batch $B --seq $T --train-steps 1 --out "$OUTDIR/$tag.safetensors" \
        "${dset[@]}" $sets >"$OUTDIR/$tag.dump.log" 2>&1; then
        tail -5 "$OUTDIR/$tag.dump.log"; summary+=("$variant $dev $name: dump FAILED"); status=1; continue
      fi
      # shellcheck disable=SC2086
      python3 "$ROOT/scripts/torch_attention_check.py" --dump "$OUTDIR/$tag.safetensors" \
        --model "$ckpt/model.safetensors" --tokens "$OUTDIR/tokens.i32" --batch $B --seq $T \
        --n-head 2 --vocab 512 "${common[@]}" --label "$variant $dev $name" $opts >"$OUTDIR/$tag.log" 2>&1
      rc=$?
      cat "$OUTDIR/$tag.log"
      [ $rc = 0 ] || status=1
      summary+=("$variant $dev $name: $(tail -1 "$OUTDIR/$tag.log") ($(grep '^gradients' "$OUTDIR/$tag.log" | cut -d'(' -f1 | sed 's/ *$//'))")
    done
  done
done
echo "== summary =="
printf '%s\n' "${summary[@]}"
exit $status
