# Prepared in session 41 (its device was withdrawn after one call): issue 23's expert offload, two ways to use PCIe
# beside the CPU pool. (a) PCIe staging with its copies as raw cudaMemcpyAsync calls (strata/dma.py) and the plan in
# plain Python (session 41's call 1: 122 us a layer queueing 3 experts' copies, ~170 us more in the rest of the host
# part); (b) --zero-copy-frac: the pairs kernel reads some experts straight from pinned host memory inside the
# captured part (no host work; new, never run on a GPU). The offload GPU tests (new: dma copies, in-place reads in
# split graphs, the seed's families in split graphs); the timeline and issue 23's offload command, 25 %, for
# pcie 0 / 0.5 and zero copy 0.375 (half the missed experts); first zero_copy_ab.py: how fast the pairs kernel reads
# pinned host memory. Build the archive first:
#   git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 80 python3 zero_copy_ab.py pairs=1,3,6 > $OUT/zero_copy.txt 2>&1  # how fast a kernel reads host memory
echo "== zero copy rc=$? t=$(( $(date +%s)-S ))"; grep -E "pairs|Error" $OUT/zero_copy.txt | cut -c1-300
timeout -s INT 170 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py \
  > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -8 | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for ARM in pcie=0.5 zc=0.375; do  # (pcie=0: session 41's call 1, the same code path)
  F=$OUT/timeline_${ARM/=/_}.txt
  timeout -s INT 70 python3 offload_timeline.py /tmp/q4km.gguf $ARM arms=16:5000 > $F 2>&1
  echo "== timeline $ARM rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads" $F | cut -c1-400
done
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1
  --cpu-threads 16 --expert-swap-interval 0 --expert-split uniform --repeats 2 --expert-cache 25%"
for ARM in "--pcie-frac 0" "--pcie-frac 0.5" "--zero-copy-frac 0.375"; do
  NAME=off25_$(echo $ARM | tr -d ' -')
  timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF $ARM --output $OUT/$NAME.json \
    > $OUT/$NAME.log 2>&1
  echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-160)"
done
