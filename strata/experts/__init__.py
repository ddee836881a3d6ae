"""Experts across device and host: routing statistics (stats), the hot-set policy (placement), routing
profiles (profile), the device slot cache (slots), the CPU expert pool (cpu_pool), the expert provider
MoE blocks call (provider), and the manager that wires them into a model (manager).

Models see none of this: a MoE block only calls its expert provider and, when attached, `stats.record`.
"""
