# Session 71, call 2 (the same warm H100 right after call 1, 554efcd): the A/B again, host gather first.
source tools/gpu_ab/device_setup.sh >/dev/null 2>&1; EXP='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 exp_split_3 src "$EXP" 140; STRATA_PLE_IN_PLACE=1 spec_c4 exp_inplace_2 src "$EXP" 140; runs_table "exp_*.json"
