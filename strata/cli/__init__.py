"""Command line: `strata generate | chat | bench`."""
