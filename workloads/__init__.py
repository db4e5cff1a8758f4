"""Workloads that run inside every node of a lab.

Each module exposes `run(ctx, **options)` and checks its own results through
`ctx.check(...)`; `python -m workloads --workloads a,b` runs several of them in
one process group (see `_common.py` for the result-line contract).
"""
