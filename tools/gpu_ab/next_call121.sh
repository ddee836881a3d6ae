# Prepared in session 75 (~9 minutes; run under a 600 s limit): offloaded prompts with the CPU's pairs beside the
# device's. Until session 75 an eager offloaded layer (a prompt's: issue 23's offload runs its 64-token prompts
# eagerly, TTFT ~96 ms on the H200 at 25 %) read its hidden rows to the host after queuing the resident pairs and
# the staged rounds, so the CPU waited for all of them; the staged rounds' slot ids synced the stream too. The
# offload GPU tests, then issue 23's offload command at 25 % from HEAD (src) and from 40382f8 (prev), alternated, then
# HEAD with --prompt-stream-min-pairs 4 and 5 (6 is the default; its balance was tuned with the CPU waiting).
# Build the archives first: git archive --format=tar.gz HEAD -o .base/src.tar; git archive --format=tar.gz 40382f8
# -o .base/prev.tar; git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
mkdir -p /tmp/prev && tar -xf .base/prev.tar -C /tmp/prev && cp tools/gpu_ab/*.py /tmp/prev/
source tools/gpu_ab/device_setup.sh
left() { echo $(( $1 - ($(date +%s)-S) )); }
quantize_q4km
run_tests offload 150 tests/experts/test_expert_offload_gpu.py
off() {  # off NAME TREE [EXTRA ARGS]: the offload command from /tmp/TREE, its c1 line and TTFT
  local name=$1 tree=$2; shift 2
  [ $(left 580) -gt 60 ] || return
  (cd /tmp/$tree && PYTHONPATH=/tmp/$tree:/tmp/site:/tmp/hf timeout -k 5 -s INT 75 python3 -m strata.cli.main bench \
    offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 \
    --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache 25% "$@" \
    --output $OUT/$name.json > $OUT/$name.log 2>&1)
  echo "== $name rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c1" $OUT/$name.log | cut -c1-170 | tee -a $OUT/ab.txt
}
for R in 1 2; do off src_r$R src; off prev_r$R prev; done
off src_min4 src --prompt-stream-min-pairs 4
off src_min5 src --prompt-stream-min-pairs 5
exit 0
