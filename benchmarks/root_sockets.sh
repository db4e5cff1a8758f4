#!/bin/bash
# The 3-node slow-node broadcast of docs/network.md ("One class per peer"), watched from the
# root: 3 compose nodes at 100mbit, node 2 at 50mbit, bench broadcast at 1 and 4 MiB; every
# node's qdiscs and TCP state sampled (benchmarks/watch_queues.sh), then read against
# trace.json by benchmarks/root_sockets.py (per call: each rank's exit, and the root's two
# data connections over time).
#
#   OUT=root-sockets IMAGE=labctl-cpu:latest bash benchmarks/root_sockets.sh
cd "$(dirname "$0")/.." || exit 1
export OUT=${OUT:-root-sockets} OP=broadcast NODES=3 SAMPLE="0 1 2" ITERS=10 NAME=bq
bash benchmarks/watch_queues.sh && python3 benchmarks/root_sockets.py "$OUT"
