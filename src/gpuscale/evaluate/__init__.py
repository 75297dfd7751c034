"""Evaluation harness: run policies on one scenario, score them and report.

The harness is where claims are proven: every policy sees the same trace, seed
and faults, and is scored by the same rules (``results``) and shown the same
way (``report``).
"""
