set -u
export NCCL_NVLS_ENABLE=0
B=build-device
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/cmake.log 2>&1
make -C $B -j16 attnlab attnlab_tests bench_focus_soft bench_sfa > $OUT/build.log 2>&1 || { grep -E "error" -A3 $OUT/build.log | head -40; }
echo "build done $(date +%T)"
timeout 200 $B/attnlab_tests --gtest_filter='FocusTiledCuda.*:FocusCuda.*:SfaFlashCuda.*:SfaCuda.*:Focus*:Sfa*' > $OUT/tests.log 2>&1; echo "tests rc=$?"
grep -E "^\[  FAILED|^\[  PASSED|Failure" $OUT/tests.log | head -30
timeout 90 $B/bench_focus_soft $OUT/focus_soft.csv > $OUT/bench_focus_soft.log 2>&1; echo "bench_focus_soft rc=$?"; tail -14 $OUT/bench_focus_soft.log
timeout 90 $B/bench_sfa --csv=$OUT/sfa.csv --T=4096,16384,65536 > $OUT/bench_sfa.log 2>&1; echo "bench_sfa rc=$?"; tail -22 $OUT/bench_sfa.log
for v in "focus" "sfa --set attention.sfa.kernel=flash"; do
 n=${v%% *}
 timeout 80 $B/attnlab train recipes/gpt2-124m-$n.yaml ${v#$n} --set data.source=synthetic \
    --set data.synthetic.vocab_size=50257 --set data.synthetic.train_tokens=4000000 \
    --set data.synthetic.val_tokens=300000 --set train.steps=4 --set schedule.warmup_steps=2 \
    --set train.batch_tokens=131072 --set train.micro_batch=32 \
    --set eval.every=0 --set eval.at_end=false --set checkpoint.at_end=false \
    --set train.out_dir=/tmp/run_$n > $OUT/train_$n.log 2>&1; echo "$v rc=$?"; tail -2 $OUT/train_$n.log
done
cd $OUT && tar czf /tmp/l.tgz . && rm -rf ./* && mv /tmp/l.tgz .
