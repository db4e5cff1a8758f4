# zoo: culprit=0 op=set line=22|21 kind=hang nproc=3 timeout=30
# zoo: about=rank 0 publishes the resolved run config in the store for the others to read, but skips store.set when the config matches the one it cached last run; it moves on to the first all_reduce while ranks 1 and 2 block in store.get for a key nobody will write
# zoo: source=https://github.com/pytorch/pytorch/issues/107177
import json
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = _get_default_store()
CACHE = Path(tempfile.gettempdir()) / "resolved_config_cache.json"

if rank == 0:
    config = {"lr": 3e-4, "batch_size": 32, "warmup": 100}
    CACHE.write_text(json.dumps(config))            # what the previous run of this job left behind
    cached = json.loads(CACHE.read_text())
    if config != cached:                            # "nothing changed, nothing to publish"
        store.set("run_config", json.dumps(config))
else:
    config = json.loads(store.get("run_config"))

model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
for step in range(3):
    model(torch.randn(config["batch_size"], 8)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
