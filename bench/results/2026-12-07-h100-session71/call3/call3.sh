# Session 71, call 3: tools/gpu_ab/next_call111.sh as committed in 33c3c6a (git show 33c3c6a:tools/gpu_ab/next_call111.sh),
# run under a 300 s limit; the script now in tools/gpu_ab/ counts its time from before the set-up.
bash tools/gpu_ab/next_call111.sh 2>&1 | tail -40
