"""The store workload's report section (the function lives with the workload; torch-free)."""
from workloads.store import report_section as markdown  # noqa: F401
