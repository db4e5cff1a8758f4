"""The init_methods workload's report section (the function lives with the workload; torch-free)."""
from workloads.init_methods import report_section as markdown  # noqa: F401
