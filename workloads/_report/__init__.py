"""Report hooks: how a workload extends labctl's report, without edits elsewhere.

`workloads/_report/<name>.py` (torch-free; labctl imports it, nodes never do)
may define any of:

    check_options(options: dict, defaults: dict) -> None
        raise ValueError("<field>: ...") for options that cannot work (spec load time)
    check_lab(spec, options: dict, defaults: dict) -> None
        raise ValueError("<field>: ...") for a lab it cannot run in (the whole LabSpec)
    head(results) -> str                 a section before the checks per workload (env: where ranks run)
    rank_rows(results) -> list[dict]     per-rank records: "ranks" in `labctl report --format json`
    check_placement(spec, shared_dir: str | None, options: dict, defaults: dict) -> None
        the same, for rules on where the nodes run: `shared_dir` is the chosen backend's
        `Placement.shared_dir` (a directory every node sees), never its name
    markdown(results) -> str             its section of the report
    as_json(results) -> dict             its part of `labctl report --format json`
    csv(results) -> str                  `labctl report --format csv` for runs it is in
    write_files(run) -> list[Path]       plots and other files next to report.md
    compare(run_a, run_b, fmt) -> str    `labctl compare A B`
    page(results) -> list[dict]          its section of report.html, as views (_views.py;
                                         the page draws them by kind: docs/report.md)
    predict(run, world_size, sizes, fmt) -> str
                                         `labctl predict RUN --world-size N` (bench: the α–β fit)

labctl finds the module by the workload's name (labctl/report.py `hook`).
"""
