#!/bin/bash
# Session 74: Strata on GGUF files written by llama.cpp's own converter and quantizer, against llama.cpp and HF.
# Needs: /work/main/.venv (make setup), llama-cpp-python 0.3.36 built from source in /tmp/lcpvenv (its sdist
# unpacked in /tmp/lcp: pip download llama-cpp-python==0.3.36 --no-binary :all:), everything under /tmp/xc.
set -u
D=$(cd "$(dirname "$0")" && pwd); PY=/work/main/.venv/bin/python; LPY=/tmp/lcpvenv/bin/python
mkdir -p /tmp/xc && cd /tmp/xc && cp $D/*.py /tmp/xc/
quiet() { grep -v "Warn\|falling back\|dequantized to\|compress_ratios is 0\|Loading weights\|^INFO\|Writing"; }
$PY make_folders.py qwen3_next+mtp qwen3_5_moe+mtp 2>&1 | quiet
$PY make_q4e.py 2>&1 | quiet
$PY make_wide.py 2>&1 | quiet
$PY convert.py qwen3_next_mtp --outtype f32 --outfile qwen3_next.f32.gguf 2>&1 | tail -1
$PY convert.py qwen3_5_moe_mtp --outtype f32 --outfile qwen3_5_moe.f32.gguf 2>&1 | tail -1
$PY convert.py q4e_dense --outtype f32 --outfile q4e_dense.f32.gguf 2>&1 | tail -1            # AutoConfig: ratios 0
RAW_CONFIG=1 $PY convert.py q4e_qsa --outtype f32 --outfile q4e_qsa.f32.gguf 2>&1 | tail -1   # raw config.json
RAW_CONFIG=1 $PY convert.py wide_q35 --no-mtp --outtype f32 --outfile wide_q35.f32.gguf 2>&1 | tail -1
$PY convert.py wide_q4e --outtype f32 --outfile wide_q4d.f32.gguf 2>&1 | tail -1              # ratios 0
for f in wide_q35 wide_q4d; do
  $LPY quantize.py $f.f32.gguf $f.q4km.gguf Q4_K_M 2>&1 | grep "^rc"
  $PY dequant_copy.py $f.q4km.gguf $f.q4km_deq.gguf
done
echo "== F32 files of llama.cpp's converter: Strata (file) / llama.cpp (file) / HF (folder)"
for f in qwen3_next_mtp:qwen3_next qwen3_5_moe_mtp:qwen3_5_moe q4e_dense:q4e_dense q4e_qsa:q4e_qsa; do
  for n in 6 40; do $PY three_way.py ${f%%:*} ${f##*:}.f32.gguf $n 2>&1 | quiet | tail -1; done
done
echo "== Q4_K_M files of llama.cpp's quantizer: Strata (packed) / llama.cpp on gguf-py's F32 dequantization"
for f in wide_q35 wide_q4d; do $PY packed_vs_deq.py $f.q4km.gguf $f.q4km_deq.gguf 2>&1 | quiet | tail -1; done
echo "== Q4_K_M files of strata quantize (from llama.cpp's F32 files): Strata (packed) / llama.cpp on the F32 dequantization"
for f in wide_q35 wide_q4d; do
  /work/main/.venv/bin/strata quantize $f.f32.gguf $f.strata_q4km.gguf --scheme q4_k_m > /dev/null 2>&1
  $PY dequant_copy.py $f.strata_q4km.gguf $f.strata_q4km_deq.gguf
  $PY packed_vs_deq.py $f.strata_q4km.gguf $f.strata_q4km_deq.gguf 2>&1 | quiet | tail -1
done
echo "== MTP heads (llama.cpp's nextn tensors) against the safetensors heads"
for f in qwen3_next qwen3_5_moe; do $PY mtp_check.py ${f}_mtp $f.f32.gguf 2>&1 | quiet | tail -1; done
