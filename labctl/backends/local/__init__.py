"""The local backend: every node a process tree on this machine.

    backend.py     LocalBackend: places, starts, polls, stops and sweeps the nodes
    nodeguard.py   each node's keeper, run by path (standard library, psutil and
                   workloads._protocol only): subreaper, lifeline, node log
"""
