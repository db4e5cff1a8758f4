"""The compose backend: every node a container of one docker compose project.

    backend.py   ComposeBackend: the docker and compose CLI (start, poll, faults, logs, down)
    render.py    the pure renderer: a LaunchPlan in, one compose.yaml out
"""
