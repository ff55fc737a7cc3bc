set -u
export NCCL_NVLS_ENABLE=0
B=build-device
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/cmake.log 2>&1
make -C $B -j16 attnlab > $OUT/build.log 2>&1 || { grep -E "error" -A3 $OUT/build.log | head -40; }
echo "build done $(date +%T)"
mkdir -p $OUT/q1 $OUT/q2
OUT=$OUT/q1 VARIANTS="dense focus sfa" SEEDS="1 2 3" STEPS=100 BATCH_TOKENS=65536 EVAL_BATCHES=16 timeout 230 bash scripts/quality_runs.sh $B .shared 2>&1 | tail -30
echo "q1 done $(date +%T)"
OUT=$OUT/q2 VARIANTS="focus-seq focus-hardtrain" SEEDS="1" STEPS=100 BATCH_TOKENS=65536 EVAL_BATCHES=16 FOCUS_EVALS=0 timeout 60 bash scripts/quality_runs.sh $B .shared 2>&1 | tail -8
cd $OUT && tar czf /tmp/l.tgz . && rm -rf ./* && mv /tmp/l.tgz .
