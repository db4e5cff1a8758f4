#!/bin/bash
# The slow-node all_gather of docs/network.md ("The three misses"), watched from inside:
# 4 compose nodes at 100mbit, node 3 at 50mbit, bench all_gather at 1 and 4 MiB; node 3's
# and node 2's qdisc backlogs (tc -s qdisc) and TCP state (ss -tin) sampled during the run,
# then read against trace.json by benchmarks/slow_node_queues.py.
#
#   OUT=slow-node-queues bash benchmarks/slow_node_queues.sh    # runs the lab, samples, prints the table
set -u
cd "$(dirname "$0")/.."
D=${OUT:-slow-node-queues}; mkdir -p "$D"; D=$(cd "$D" && pwd)
cat > $D/lab.yaml <<LAB
name: qd
backend: compose
nodes: 4
nproc_per_node: 1
timeout: 900
links: {default: 100mbit, nodes: {3: 50mbit}}
workloads:
  - name: bench
    options: {ops: [all_gather], min_bytes: 1048576, max_bytes: 4194304, factor: 4, iters: 12, warmup_iters: 2, link: false}
LAB
rm -rf $D/run $D/s*.txt
${PYTHON:-python} -m labctl.cli up -f $D/lab.yaml --out $D/run -q > $D/up.log 2>&1 &
UP=$!
for i in $(seq 1 600); do
  c3=$(docker ps --format '{{.Names}}' | grep -E 'qd-3' | head -1)
  c2=$(docker ps --format '{{.Names}}' | grep -E 'qd-2' | head -1)
  [ -n "$c3" ] && [ -n "$c2" ] && break
  sleep 0.2
done
echo "containers: $c2 $c3"
sample='while :; do echo "@ $(date +%s%N)"; tc -s qdisc show dev eth0; tc -s qdisc show dev lab-in 2>/dev/null; ss -tin state established; sleep 0.01; done'
docker exec -u 0 $c3 sh -c "$sample" > $D/s3.txt 2>&1 &
S3=$!
docker exec -u 0 $c2 sh -c "$sample" > $D/s2.txt 2>&1 &
S2=$!
wait $UP; echo "up rc=$?"
kill $S3 $S2 2>/dev/null
wc -l $D/s3.txt $D/s2.txt
python3 "$(dirname "$0")/slow_node_queues.py" "$D"
