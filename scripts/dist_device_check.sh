#!/usr/bin/env bash
# Data-parallel checks on ONE GPU (docs/distributed.md, "What runs on one H200"):
#  0. the NcclCuda.* GPU tests (world size 1: collectives, training == backend none);
#  1. world size 1 through the nccl backend == the no-communicator path, bit for bit (GPT-2 124M
#     shape on synthetic tokens, deterministic kernels, 4 steps; losses and every tensor of the
#     final checkpoint compared);
#  2. the overhead of the nccl path at world size 1 in GPT-2 124M tok/s (synthetic data, 262K
#     tokens per step, 24 steps, median and spread of steps 5..24, runs interleaved none / nccl /
#     none / nccl; about 80 s);
#  3. two ranks on the one GPU through the real NCCL path (torchrun-style env and the TCP
#     rendezvous; each rank its own NCCL_HOSTID, else NCCL 2.28 refuses two ranks on one GPU;
#     sockets over lo unless NCCL_SOCKET_IFNAME is set),
#     fp32, ZeRO 0 and ZeRO 1, against one rank with the same global batch (accumulation), with
#     the gradient communication per step (comm ms, exposed comm ms: from metrics.jsonl);
#  4. the overlap report of GPT-2 124M bf16 on 2 ranks on the one GPU, ZeRO 0 and ZeRO 1;
#  5. rank 1 of 2 on the one GPU runs out of GPU memory at step 3 (test hook ATTNLAB_TEST_OOM):
#     rank 1 must exit non-zero with the memory estimate in its error, rank 0 within its timeout.
# Usage (repo root, on the GPU machine): bash scripts/dist_device_check.sh [build_dir]
# Environment: SKIP_BUILD=1 (use build_dir as it is), STEPS_TPUT (default 24), WARMUP_TPUT
# (default 4), TPUT_BATCH (default 262144), ONLY (e.g. "2 4": run only those parts; 0 1 2 3 4 5).
# Everything goes to $OUT (or /tmp/attnlab_dist); the summary is printed and in $OUT/summary.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=${1:-build-device}
LOGS=${OUT:-/tmp/attnlab_dist}
# GPT-2 124M checkpoints (1.6 GiB each) stay out of $OUT (the device tool returns files <= 16 MiB).
SCRATCH=${SCRATCH:-/tmp/attnlab_dist_runs}
mkdir -p "$LOGS"
SUMMARY="$LOGS/summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    >"$LOGS/cmake.log" 2>&1 || { tail -30 "$LOGS/cmake.log"; exit 1; }
  grep "attnlab: NCCL backend" "$LOGS/cmake.log" | tee -a "$SUMMARY"
  make -C "$BUILD" -j16 attnlab attnlab_tests >"$LOGS/build.log" 2>&1 \
    || { grep -E "error" -A3 "$LOGS/build.log" | head -40; exit 1; }
fi
BIN="$BUILD/attnlab"
ONLY=${ONLY:-0 1 2 3 4 5}
want() { [[ " $ONLY " == *" $1 "* ]]; }

# ---- 0. the nccl backend's GPU tests (world size 1) -------------------------------------------
if want 0; then
"$BUILD/attnlab_tests" --gtest_filter='NcclCuda.*' >"$LOGS/nccl_tests.log" 2>&1
say "== 0. NcclCuda.* (tests/cuda/test_nccl_cuda.cpp): rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" "$LOGS/nccl_tests.log" | head -10 | tee -a "$SUMMARY"
fi

# GPT-2 124M on synthetic tokens (scripts/device_check.sh does the same for its trainer run).
GPT2=(recipes/gpt2-124m-dense.yaml --set data.source=synthetic --set data.synthetic.vocab_size=50257
  --set data.synthetic.train_tokens=8000000 --set data.synthetic.val_tokens=300000
  --set schedule.warmup_steps=2 --set eval.every=0 --set eval.at_end=false --set log.every=1)

# Compares two checkpoints tensor by tensor (bytes), and two metrics files' losses.
compare_py() {
  python3 - "$@" <<'PY'
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items()}
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"loss"' in l and '"val_loss"' not in l]
mode, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "bits":
    diff = []
    for f in ("model.safetensors", "optimizer.safetensors"):
        ta, tb = tensors(f"{a}/{f}"), tensors(f"{b}/{f}")
        if ta.keys() != tb.keys():
            diff.append(f"{f}: different tensor names")
        diff += [f"{f}:{k}" for k in ta if k in tb and ta[k] != tb[k]]
    la, lb = losses(sys.argv[4]), losses(sys.argv[5])
    print(f"losses {'identical' if la == lb else 'DIFFER'} ({len(la)} steps: {la[-1] if la else '-'}); "
          f"tensors {'identical' if not diff else 'DIFFER: ' + ', '.join(diff[:5])}")
    sys.exit(0 if la == lb and not diff else 1)
else:  # "close": relative loss differences per step
    tol = float(sys.argv[4])
    la, lb = losses(a), losses(b)
    rel = [abs(x - y) / abs(y) for x, y in zip(la, lb)]
    worst = max(rel) if rel else float("inf")
    ok = len(la) == len(lb) and worst <= tol
    print(f"{len(la)} steps, worst relative loss difference {worst:.2e} (tolerance {tol:g}): "
          f"{'ok' if ok else 'FAIL'}; last losses {la[-1] if la else '-'} vs {lb[-1] if lb else '-'}")
    sys.exit(0 if ok else 1)
PY
}

# The gradient communication of rank 0's steps (metrics.jsonl of a run of several ranks): medians
# over the steps after the first of comm ms, exposed comm ms and the buckets' ms.
overlap_py() {
  python3 - "$@" <<'PY'
import json, statistics as st, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"comm_ms"' in l]
r = r[1:] if len(r) > 1 else r
if not r:
    print("no comm_ms in metrics.jsonl"); sys.exit(1)
c = [x["comm_ms"] for x in r]; e = [x["exposed_comm_ms"] for x in r]; s = [x["ms_per_step"] for x in r]
b = [ms for x in r for ms in x["comm_bucket_ms"]]
print(f"{len(r)} steps: comm {st.median(c):.1f} ms (min {min(c):.1f}, max {max(c):.1f}) in "
      f"{len(r[0]['comm_bucket_ms'])} buckets (median bucket {st.median(b):.2f} ms), exposed "
      f"{st.median(e):.1f} ms (min {min(e):.1f}, max {max(e):.1f}), hidden "
      f"{100 * (1 - st.median(e) / st.median(c)) if st.median(c) > 0 else 0:.0f}%; step {st.median(s):.0f} ms")
PY
}

# ---- 1. world size 1: nccl == none, bit for bit ------------------------------------------------
if want 1; then
say "== 1. world size 1: nccl backend vs no communicator (GPT-2 124M, bf16, deterministic, 4 steps)"
for b in none nccl; do
  rm -rf "$SCRATCH/w1_$b"
  timeout 300 "$BIN" train "${GPT2[@]}" --set train.steps=4 --set train.deterministic=true \
    --set checkpoint.at_end=true \
    --set train.batch_tokens=131072 --set distributed.backend=$b \
    --set train.out_dir="$SCRATCH/w1_$b" >"$LOGS/w1_$b.log" 2>&1
  say "   $b: rc=$? $(grep -c '"loss"' "$SCRATCH/w1_$b/metrics.jsonl" 2>/dev/null) steps logged"
done
say "   $(compare_py bits "$SCRATCH/w1_none/checkpoints/step_00000004" "$SCRATCH/w1_nccl/checkpoints/step_00000004" \
  "$SCRATCH/w1_none/metrics.jsonl" "$SCRATCH/w1_nccl/metrics.jsonl" 2>&1)"

fi

# ---- 2. overhead of the nccl path at world size 1 ---------------------------------------------
if want 2; then
STEPS=${STEPS_TPUT:-24}
WARM=${WARMUP_TPUT:-4}
TB=${TPUT_BATCH:-262144}
say "== 2. tok/s at world size 1, GPT-2 124M bf16, $TB tokens per step (steps $((WARM + 1))..$STEPS)"
i=0
for b in none nccl none nccl; do
  i=$((i + 1))
  d="$LOGS/tput_${b}_$i"
  rm -rf "$d"
  t0=$(date +%s)
  timeout 400 "$BIN" train "${GPT2[@]}" --set train.steps=$STEPS --set checkpoint.at_end=false \
    --set train.batch_tokens=$TB --set distributed.backend=$b --set train.out_dir="$d" \
    >"$d.log" 2>&1
  say "   run $i ($b): rc=$? in $(( $(date +%s) - t0 )) s"
done
python3 - "$LOGS" "$WARM" <<'PY' | tee -a "$SUMMARY"
import glob, json, statistics as st, sys
logs, warm = sys.argv[1], int(sys.argv[2])
per = {}
for b in ("none", "nccl"):
    for d in sorted(glob.glob(f"{logs}/tput_{b}_*/metrics.jsonl")):
        t = [json.loads(l)["tok_per_s"] for l in open(d) if '"tok_per_s"' in l]
        t = t[warm:]
        if not t: continue
        q = st.quantiles(t, n=4) if len(t) >= 4 else [min(t), st.median(t), max(t)]
        print(f"   {b:>5} {d.split('/')[-2]}: median {st.median(t):,.0f} tok/s over {len(t)} steps, "
              f"p25-p75 {q[0]:,.0f}-{q[2]:,.0f} (spread {100 * (q[2] - q[0]) / st.median(t):.2f}%), "
              f"min {min(t):,.0f}, max {max(t):,.0f}")
        per.setdefault(b, []).extend(t)
if "none" in per and "nccl" in per:
    a, b = st.median(per["none"]), st.median(per["nccl"])
    print(f"   pooled medians: none {a:,.0f}, nccl {b:,.0f} tok/s: nccl overhead {100 * (a - b) / a:+.2f}% "
          f"(target < 1%)")
PY
fi

# ---- 3. two ranks on one GPU (NCCL over sockets, NCCL_HOSTID per rank) vs one rank -------------
SMALL=(recipes/gpt2-124m-dense.yaml --set model.n_layer=4 --set model.n_head=4
  --set model.n_embd=256 --set data.source=synthetic --set data.synthetic.vocab_size=50257
  --set data.synthetic.train_tokens=4000000 --set data.synthetic.val_tokens=200000
  --set schedule.warmup_steps=2 --set eval.every=5 --set eval.batches=4 --set eval.at_end=true
  --set train.steps=10 --set train.micro_batch=8 --set train.seq_len=256
  --set train.batch_tokens=4096 --set train.precision=fp32 --set train.deterministic=true
  --set checkpoint.at_end=true --set distributed.timeout_s=120)
if want 3; then
say "== 3. two ranks on the one GPU (fp32, 10 steps of 4096 tokens) vs one rank"
rm -rf "$LOGS/r1"
timeout 300 "$BIN" train "${SMALL[@]}" --set train.out_dir="$LOGS/r1" >"$LOGS/r1.log" 2>&1
say "   1 rank (2 micro-batches accumulated): rc=$?"
for zero in 0 1; do
  d="$LOGS/r2_zero$zero"
  rm -rf "$d"
  port=$((29500 + zero))
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NCCL_HOSTID="attnlab-rank$r" \
      NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=1 \
      timeout 300 "$BIN" train "${SMALL[@]}" --set distributed.backend=nccl \
      --set distributed.zero=$zero --set train.out_dir="$d" >"$d.rank$r.log" 2>&1 &
    pids[$r]=$!
  done
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
  say "   2 ranks ZeRO $zero: rc=$rc0/$rc1; $(grep -h 'ranks, nccl' "$d.rank0.log" | head -1 | sed 's/.*tok\/step/tok\/step/')"
  [ $rc0 -ne 0 ] && tail -5 "$d.rank0.log" | tee -a "$SUMMARY"
  [ $rc1 -ne 0 ] && tail -5 "$d.rank1.log" | tee -a "$SUMMARY"
  say "   losses vs 1 rank: $(compare_py close "$d/metrics.jsonl" "$LOGS/r1/metrics.jsonl" 1e-4 2>&1)"
  grep -h "val loss" "$d.rank0.log" | tail -1 | sed 's/^/   2 ranks: /' | tee -a "$SUMMARY"
  say "   gradient communication (rank 0): $(overlap_py "$d/metrics.jsonl" 2>&1)"
done
# The same under mpirun (the NCCL id by MPI_Bcast), when OpenMPI is installed.
if command -v mpirun >/dev/null 2>&1; then
  d="$LOGS/r2_mpirun"
  rm -rf "$d"
  NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=1 OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun -np 2 --allow-run-as-root --oversubscribe \
    --bind-to none -x NCCL_NVLS_ENABLE -x NCCL_SOCKET_IFNAME -x NCCL_IB_DISABLE -x PATH -x LD_LIBRARY_PATH \
    sh -c 'NCCL_HOSTID=attnlab-mpi$OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_LOCAL_RANK=0 exec "$0" "$@"' \
    "$BIN" train "${SMALL[@]}" --set distributed.zero=1 --set train.out_dir="$d" >"$d.log" 2>&1
  say "   mpirun 2 ranks ZeRO 1: rc=$?; losses vs 1 rank: $(compare_py close "$d/metrics.jsonl" "$LOGS/r1/metrics.jsonl" 1e-4 2>&1)"
fi
grep -h "val loss" "$LOGS/r1.log" | tail -1 | sed 's/^/   1 rank:  /' | tee -a "$SUMMARY"
fi

# Two ranks on the one GPU, torchrun-style (each its own NCCL_HOSTID):
#   run2 <out dir> <port> <"VAR=value" for rank 1 only, or ""> <attnlab train args...>
# rank r logs to <out dir>.rank<r>.log; sets rc0 and rc1.
run2() {
  local d=$1 port=$2 extra1=$3
  shift 3
  rm -rf "$d"
  for r in 0 1; do
    env $([ $r = 1 ] && echo "$extra1") RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port NCCL_HOSTID="attnlab-rank$r" NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} \
      NCCL_IB_DISABLE=1 timeout 300 "$BIN" train "$@" --set distributed.backend=nccl \
      --set train.out_dir="$d" >"$d.rank$r.log" 2>&1 &
    pids[$r]=$!
  done
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
}

# ---- 4. the overlap report on GPT-2 124M, 2 ranks on the one GPU -------------------------------
# (the ranks share the GPU and talk over sockets: the numbers show the timeline works and how
# much of slow communication the backward hides, not NVLink speed)
if want 4; then
say "== 4. GPT-2 124M bf16, 2 ranks on the one GPU, 131K tokens per step, 8 steps: gradient communication"
for zero in 0 1; do
  run2 "$LOGS/ov_zero$zero" $((29510 + zero)) "" "${GPT2[@]}" --set train.steps=8 \
    --set train.micro_batch=16 --set train.batch_tokens=131072 --set checkpoint.at_end=false \
    --set distributed.zero=$zero --set distributed.timeout_s=120
  say "   ZeRO $zero: rc=$rc0/$rc1; $(overlap_py "$LOGS/ov_zero$zero/metrics.jsonl" 2>&1)"
  grep -h "^step\|step  *8/" "$LOGS/ov_zero$zero.rank0.log" | tail -1 | sed 's/^/   /' | tee -a "$SUMMARY"
done
fi

# ---- 5. a rank out of GPU memory mid-run ends the job with its memory estimate ---------------
if want 5; then
say "== 5. rank 1 of 2 (one GPU) out of GPU memory at step 3 (ATTNLAB_TEST_OOM=1:3), timeout_s 20"
t0=$(date +%s)
run2 "$LOGS/oom" 29520 "ATTNLAB_TEST_OOM=1:3" "${SMALL[@]}" --set train.steps=50 \
  --set checkpoint.at_end=false --set distributed.timeout_s=20
el=$(( $(date +%s) - t0 ))
oom_msg=$(grep -h "out of GPU memory" "$LOGS/oom.rank1.log" | head -1)
r0_msg=$(grep -h "ending the job\|rank 0 of 2" "$LOGS/oom.rank0.log" | head -1)
ok=FAIL
[ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] && [[ "$oom_msg" == *"the run needs about"*"hint:"* ]] && [ $el -lt 120 ] && ok=ok
say "   $ok: rc=$rc0/$rc1 after $el s (expected both non-zero, well under 120 s)"
say "   rank 1: ${oom_msg:-(no out-of-memory message)}"
say "   rank 0: ${r0_msg:-(no message)}"
fi
echo "summary: $SUMMARY"
