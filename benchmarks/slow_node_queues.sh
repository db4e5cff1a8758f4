#!/bin/bash
# The slow-node all_gather of docs/network.md ("The three misses"), watched from inside:
# 4 compose nodes at 100mbit, node 3 at 50mbit, bench all_gather at 1 and 4 MiB; node 3's
# and node 2's qdisc backlogs (tc -s qdisc) and TCP state (ss -tin) sampled during the run
# (benchmarks/watch_queues.sh), then read against trace.json by benchmarks/slow_node_queues.py.
#
#   OUT=slow-node-queues bash benchmarks/slow_node_queues.sh    # runs the lab, samples, prints the table
cd "$(dirname "$0")/.." || exit 1
export OUT=${OUT:-slow-node-queues} OP=all_gather NODES=4 SAMPLE="3 2" ITERS=12 NAME=qd
bash benchmarks/watch_queues.sh && python3 benchmarks/slow_node_queues.py "$OUT"
