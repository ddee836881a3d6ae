"""Benchmarks: one JSON result schema, offline throughput (and peers measured in the same run)."""
