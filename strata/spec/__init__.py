"""Speculative decoding: drafters (suffix / prompt lookup, synthetic, MTP) and verification.

Drafters propose token ids from committed history only; `verify` decides per slot how many drafts
the target accepts and which token follows. Nothing here touches caches or recurrent state: that
is `commit`'s job (DESIGN.md §4). Import the modules directly (`strata.spec.verify`, ...).
"""
