#!/bin/bash
# A shaped compose lab watched from inside: N nodes at 100mbit, the last one at 50mbit, the
# bench of one op at 1 and 4 MiB; on the nodes named in SAMPLE, the qdisc backlogs (tc -s
# qdisc, eth0 and lab-in) and TCP state (ss -tin: BBR's estimate, cwnd, round trip, bytes
# acked) every ~20 ms while it runs, into $OUT/s<node>.txt beside the run folder $OUT/run.
# benchmarks/slow_node_queues.sh and benchmarks/root_sockets.sh call it and read the samples.
#
#   OUT=F OP=broadcast NODES=3 SAMPLE="0 1 2" ITERS=10 IMAGE=labctl-cpu:latest bash benchmarks/watch_queues.sh
set -u
cd "$(dirname "$0")/.."
D=${OUT:?OUT: the folder to write}; mkdir -p "$D"; D=$(cd "$D" && pwd)
NODES=${NODES:-3}; LAST=$((NODES - 1)); NAME=${NAME:-wq}
cat > $D/lab.yaml <<LAB
name: $NAME
backend: compose
nodes: $NODES
nproc_per_node: 1
timeout: 900
image: ${IMAGE:-labctl-cpu:latest}
links: {default: 100mbit, nodes: {$LAST: 50mbit}}
workloads:
  - name: bench
    options: {ops: [${OP:-broadcast}], min_bytes: 1048576, max_bytes: 4194304, factor: 4, iters: ${ITERS:-10}, warmup_iters: 2, link: false}
LAB
rm -rf $D/run $D/s*.txt
${PYTHON:-python} -m labctl.cli up -f $D/lab.yaml --out $D/run -q > $D/up.log 2>&1 &
UP=$!
sample='while :; do echo "@ $(date +%s%N)"; tc -s qdisc show dev eth0; tc -s qdisc show dev lab-in 2>/dev/null; ss -tin state established; sleep 0.005; done'
for node in ${SAMPLE:-$(seq 0 $LAST)}; do
  c=
  for i in $(seq 1 600); do
    c=$(docker ps --format '{{.Names}}' | grep -E -- "-$NAME-$node-[0-9]+$" | head -1)
    [ -n "$c" ] && break
    sleep 0.2
  done
  echo "node $node: ${c:-no container}"
  [ -n "$c" ] && docker exec -u 0 $c sh -c "$sample" > $D/s$node.txt 2>&1 &
done
wait $UP; echo "up rc=$?"
kill $(jobs -p) 2>/dev/null
wc -l $D/s*.txt
