# Session 30's call 3 again, after the packed LM head's 2-8 row tiling: issue 29 at Q4_K_M (2 repeats) and issue
# 23's 30B-A3B Q4_K_M command.
bash bench/results/2026-12-03-h200-session30/call3.sh
