# Session 59, call 5 (right after call 4 on the same warm H100, /tmp/q4km.gguf kept): issue 23's c8 at fe63084 (src)
# against session 58's last commit 7a03bb5 (prev: git archive --format=tar.gz 7a03bb5 -o .base/prev.tar), two rounds.
source tools/gpu_ab/device_setup.sh; S=$(date +%s); rm -rf /tmp/prev; mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
ls /tmp/q4km.gguf && bench_arms 2 8 src prev 2>&1 | tail -12
