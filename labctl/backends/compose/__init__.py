"""The compose backend: every node a container of one docker compose project.

    backend.py     ComposeBackend: the verbs (start, poll, faults, logs, down)
    docker.py      the docker and compose CLI: one process per call, the project, the run's labels
    engine.py      the containers as the engine sees them (inspect, events), as node outcomes
    logsources.py  where a node's output is read: its whole log, the join lines so far
    preflight.py   what must hold before a start: Compose, engine, image, the kernel's tc
    render.py      the pure renderer: a LaunchPlan in, one compose.yaml out
    shaping.py     what one node's tc applies for the lab's links
"""
