#!/bin/bash
# Alternated rounds: quant_moe on one thread, the 30B-A3B's expert shape (tools/cpu_moe_types.py), the tree before
# this session (BASE, 4ebced6) against this session's (NEW), each ISA the CPU has; NEW's avx512vbmi (the default on
# this VM) beside them. Each tree builds its own library (its own STRATA_CACHE_DIR); `python -c` runs in the base tree
# (its sys.path starts with the working directory).
# usage: cpu_moe_ab.sh BASE_TREE NEW_TREE ROUNDS TYPES
base=$1 new=$2 rounds=$3 types=$4
py=${PYTHON:-python}
for r in $(seq "$rounds"); do
  for isa in avx2 avx512; do
    echo -n "round $r base "  # the base tree's cpu_moe_types takes no ISA: cpu_quant.set_isa first
    (cd "$base" && STRATA_CACHE_DIR=/tmp/cache-base PYTHONPATH=$base $py -c "
import sys; sys.argv = ['x', '$types']; sys.path.insert(0, '$base/tools')
from strata.kernels import cpu_quant; cpu_quant.set_isa('$isa'); print('$isa', end=' | ')
import cpu_moe_types; cpu_moe_types.main()")
    echo -n "round $r new  "; STRATA_CACHE_DIR=/tmp/cache-new PYTHONPATH=$new $py $new/tools/cpu_moe_types.py "$types" $isa
  done
  echo -n "round $r new  "; STRATA_CACHE_DIR=/tmp/cache-new PYTHONPATH=$new $py $new/tools/cpu_moe_types.py "$types" avx512vbmi
done
