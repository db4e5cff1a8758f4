# zoo: culprit=0 op=all_gather_object line=32|30 kind=exception nproc=3 timeout=30
# zoo: about=each rank all_gathers its evaluation record; rank 0's record also carries the results writer it owns (a helper object holding a threading.Lock for its file), which cannot be pickled: rank 0 raises in all_gather_object while the others wait for its object
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/17269 (TypeError: cannot pickle '_thread.lock' object)
import threading

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


class ResultsWriter:
    def __init__(self, path):
        self.path, self.lock, self.rows = path, threading.Lock(), []

    def add(self, row):
        with self.lock:
            self.rows.append(row)


writer = ResultsWriter("/tmp/eval_results.jsonl") if rank == 0 else None
model = torch.nn.Linear(6, 2)
with torch.no_grad():
    x, y = torch.randn(64, 6), torch.randint(0, 2, (64,))
    acc = (model(x).argmax(1) == y).float().mean().item()

record = {"rank": rank, "acc": acc, "n": 64}
if writer is not None:
    record["writer"] = writer                          # "so rank 0 can append the merged rows"
records = [None] * world
dist.all_gather_object(records, record)
if rank == 0:
    for r in records:
        writer.add({"rank": r["rank"], "acc": r["acc"]})
    print(sum(r["acc"] * r["n"] for r in records) / sum(r["n"] for r in records), flush=True)
dist.destroy_process_group()
