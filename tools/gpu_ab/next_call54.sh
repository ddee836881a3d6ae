# Session 53 (~7 minutes, on an H200 only; after next_call56.sh and next_call57.sh): issue 23's commands on the
# machine its targets are for, none run there since session 50 (before the pairs' K-step sums and the fused merge by
# default): session 50's call 1 (c1 / c8 / c16, 512-token prefill, the offload command at 25 % and 50 %), as it ran.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
bash bench/results/2026-12-05-session50/call1.sh
