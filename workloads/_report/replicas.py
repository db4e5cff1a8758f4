"""The replicas workload's report section (the function lives with the workload; torch-free)."""
from workloads.replicas import report_section as markdown  # noqa: F401
