"""Slots, admission and the per-step plan. Pure Python: no torch, no model, no device."""
