# zoo: culprit=1 op=register_comm_hook|all_reduce line=16|23|11 kind=abort nproc=2 timeout=30
# zoo: about=the trainer registers DDP's fp16_compress_hook when the node's launcher config asks for compressed gradients (meant for the slow-interconnect partition); rank 1's node has it set, so its gradient buckets are all_reduced as float16 while rank 0 sends float32: the byte counts differ and gloo aborts a rank in the first backward
# zoo: source=https://github.com/pytorch/pytorch/pull/63375
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
LAUNCH_CFG = [{"grad_compression": "none"}, {"grad_compression": "fp16"}][rank]

torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8)))
if LAUNCH_CFG["grad_compression"] == "fp16":
    model.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

for step in range(5):
    x, y = torch.randn(32, 64), torch.randint(0, 8, (32,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

dist.barrier()
dist.destroy_process_group()
