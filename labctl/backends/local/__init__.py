"""The local backend: every node a process tree on this machine.

    backend.py     LocalBackend: places, starts, polls, stops and sweeps the nodes
    placement.py   local_placement: loopback, the ports taken from the base port, the
                   run folder's shared/ and torchrun/ as the nodes name them
    nodeguard.py   each node's keeper, run by path (standard library, psutil and
                   workloads._protocol only): subreaper, lifeline, node log
"""
