# Sourced at the start of a device call (run from the carried working tree, carry [".whl", ".base"]):
# installs the carried wheels, unpacks the git archive .base/src.tar to /tmp/src (never the working tree,
# which may hold uncommitted edits), copies the A/B scripts beside it and enters it. Build the archive first:
#   git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
export PYTHONUNBUFFERED=1 STRATA_COMMIT=$(cat .base/COMMIT)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
mkdir -p /tmp/src && tar -xf .base/src.tar -C /tmp/src && cd /tmp/src && cp tools/gpu_ab/*.py .
export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf
