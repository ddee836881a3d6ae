# usage: bash tree_ab.sh (from anywhere; /tmp/wt_head = git worktree of the parent commit)
HERE=$(cd $(dirname $0) && pwd)
# alternate two trees' libraries: b32.py with the best ISA only
for r in 1 2 3 4 5; do for T in /tmp/wt_head /work/main; do
  echo "== $T round $r"; (cd $T && PYTHONPATH=$T COUNT=${COUNT:-1} ISAS=avx512 /work/main/.venv/bin/python $HERE/b32.py)
done; done
