# Session 61, CPU (2-core VM): a 4-layer Qwen3-Next at Q4_K_M (3 Gated DeltaNet layers + 1 attention; made with
# `strata quantize 'random:qwen3-next-80b-a3b?num_hidden_layers=4' /tmp/next4.gguf --scheme q4_k_m --device cpu
# --dtype bfloat16`), the native recurrence (default) against STRATA_TORCH_CPU_GDN=1 (the torch path), two alternated
# rounds. --cpu-matmul auto picks int8 activations for this file.
for R in 1 2; do for ARM in native torch; do
  if [ $ARM = torch ]; then export STRATA_TORCH_CPU_GDN=1; else unset STRATA_TORCH_CPU_GDN; fi
  echo "== round $R $ARM"
  python -m strata.cli.main bench offline /tmp/next4.gguf --device cpu --max-model-len 512 --num-prompts 4 \
    --input-len 32 --output-len 32 --concurrency 1,4 --prefill-lens 256 2>&1 | grep -E "strata_c|prefill_"
done; done
