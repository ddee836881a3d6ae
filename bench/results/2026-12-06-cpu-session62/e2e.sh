# Session 62, CPU (2-core VM): the native causal conv of the Gated DeltaNet layers (default) against
# STRATA_TORCH_CPU_CONV=1 (its torch form), on session 61's 4-layer Qwen3-Next at Q4_K_M (/tmp/next4.gguf: see
# ../2026-12-06-cpu-session61/e2e.sh), two alternated rounds.
for R in 1 2; do for ARM in native torch; do
  if [ $ARM = torch ]; then export STRATA_TORCH_CPU_CONV=1; else unset STRATA_TORCH_CPU_CONV; fi
  echo "== round $R $ARM"
  python -m strata.cli.main bench offline /tmp/next4.gguf --device cpu --max-model-len 512 --num-prompts 4 \
    --input-len 32 --output-len 32 --concurrency 1,4 --prefill-lens 256 2>&1 | grep -E "strata_c|prefill_"
done; done
