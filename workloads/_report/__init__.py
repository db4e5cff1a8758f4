"""The workloads' plugins: how a workload extends labctl, without edits elsewhere.

`workloads/<name>.py`'s plugin is `workloads/_report/<name>.py` (torch-free; labctl
imports it, nodes never do), which declares once what the workload offers:

    WORKLOAD = Workload("<name>", views=..., data=..., check_options=..., ...)

`Workload` and the view model (`Heading`, `Text`, `Table`, `Group`, `BeforeAfter`,
`Messages`, `Lines`, `Matrix`, `Csv`) are in workloads/_protocol/plugin.py, which says
what each field is; `_views.py` has builders and the helpers that find a workload's
records. labctl draws the views as report.md (labctl/draw.py) and as the page
(labctl/html), the same views for both; `show` keeps one to one of them.

labctl finds the plugin by the workload's name (labctl/plugins.py). A plugin describes:
typed views and data, no I/O, and it never imports labctl (tests/test_layers.py); what
labctl does with a run beyond drawing the views (files next to report.md, `labctl
compare`, `labctl predict`) is the part its `Workload.host` names in labctl/reports/.
What both sides read (the links model, the lab's bounds) is workloads/_protocol's.
"""
