"""Seconds from launching `strata serve` (bundled model, CPU) to its ready line; usage: ready.py TREE [N]"""
import os, subprocess, sys, time, socket
tree, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
for _ in range(n):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    t = time.monotonic()
    proc = subprocess.Popen(["/work/main/.venv/bin/python", "-m", "strata.cli.main", "serve", "--port", str(port),
                             "--device", "cpu"], cwd=tree, env={**os.environ, "PYTHONPATH": tree},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "ready at" in line:
            print(f"{tree}: ready in {time.monotonic() - t:.1f} s", flush=True)
            break
    else:
        print("no ready line:", "".join(lines[-20:]))
    proc.terminate(); proc.wait(30)
