#!/bin/bash
# The 3-node slow-node broadcast of docs/network.md ("One class per peer"), watched from the
# root: 3 compose nodes at 100mbit, node 2 at 50mbit, bench broadcast at 1 and 4 MiB; every
# node's qdisc backlogs (tc -s qdisc) and TCP state (ss -tin: BBR's bandwidth estimate,
# pacing rate, cwnd, bytes acked) sampled during the run, then read against trace.json by
# benchmarks/root_sockets.py (per call: each rank's exit, and the root's two data
# connections over time).
#
#   OUT=root-sockets IMAGE=labctl-cpu:latest bash benchmarks/root_sockets.sh
set -u
cd "$(dirname "$0")/.."
D=${OUT:-root-sockets}; mkdir -p "$D"; D=$(cd "$D" && pwd)
cat > $D/lab.yaml <<LAB
name: bq
backend: compose
nodes: 3
nproc_per_node: 1
timeout: 900
image: ${IMAGE:-labctl-cpu:latest}
links: {default: 100mbit, nodes: {2: 50mbit}}
workloads:
  - name: bench
    options: {ops: [broadcast], min_bytes: 1048576, max_bytes: 4194304, factor: 4, iters: 10, warmup_iters: 2, link: false}
LAB
rm -rf $D/run $D/s*.txt
${PYTHON:-python} -m labctl.cli up -f $D/lab.yaml --out $D/run -q > $D/up.log 2>&1 &
UP=$!
for i in $(seq 1 600); do
  c0=$(docker ps --format '{{.Names}}' | grep -E 'bq-0' | head -1)
  c1=$(docker ps --format '{{.Names}}' | grep -E 'bq-1' | head -1)
  c2=$(docker ps --format '{{.Names}}' | grep -E 'bq-2' | head -1)
  [ -n "$c0" ] && [ -n "$c1" ] && [ -n "$c2" ] && break
  sleep 0.2
done
echo "containers: $c0 $c1 $c2"
sample='while :; do echo "@ $(date +%s%N)"; tc -s qdisc show dev eth0; tc -s qdisc show dev lab-in 2>/dev/null; ss -tin state established; sleep 0.005; done'
docker exec -u 0 $c0 sh -c "$sample" > $D/s0.txt 2>&1 &
docker exec -u 0 $c1 sh -c "$sample" > $D/s1.txt 2>&1 &
docker exec -u 0 $c2 sh -c "$sample" > $D/s2.txt 2>&1 &
wait $UP; echo "up rc=$?"
kill $(jobs -p) 2>/dev/null
python3 "$(dirname "$0")/root_sockets.py" "$D"
