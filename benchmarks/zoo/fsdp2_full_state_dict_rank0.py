# zoo: culprit=0 op=get_model_state_dict|all_gather_into_tensor line=29|27 kind=abort nproc=2 timeout=40
# zoo: about=FSDP2 training exports a full (unsharded) state dict, but only rank 0 calls get_model_state_dict: its parameter all-gather meets the other rank's next forward all-gather, of another size, and gloo aborts rank 0
# zoo: source=https://github.com/pytorch/pytorch/issues/73383
import os
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
out_dir = tempfile.mkdtemp(prefix="export-")

for step in range(1, 5):
    model(torch.randn(8, 16)).sum().backward()
    opt.step(); opt.zero_grad()
    if step == 2 and rank == 0:               # the bug: a collective under the main-process check
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        sd = get_model_state_dict(model, options=options)
        torch.save(sd, os.path.join(out_dir, "model.pt"))
dist.destroy_process_group()
