"""Runs `strata ...` with Q8_0 partial-chunk rows read by the packed kernels (flag on)."""
import sys
from strata.kernels import packed_gemv
packed_gemv.Q8_0_PARTIAL_CHUNKS = True
from strata.cli.main import main
sys.exit(main(sys.argv[1:]))
