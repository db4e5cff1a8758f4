"""The host's part of the workloads' reports: what labctl does with a run that a plugin
only describes. A plugin (workloads/_report/<name>.py) returns typed views and data,
never imports labctl and does no I/O; here the files are written next to report.md
(bench's nccl-tests JSON and plots), two runs compared and a run's measurements scaled to
another world size (`labctl predict`), and `labctl preflight`'s table drawn. A plugin
names its part by `Workload.host`; hosts.py maps the name to the functions.
"""
