# zoo: culprit=2 op=broadcast line=15|14|12 kind=mismatch nproc=3 timeout=30
# zoo: about=with TORCH_DISTRIBUTED_DEBUG=DETAIL, rank 2 allocates the broadcast buffer from its own sequence length; torch's fingerprint check reports the shapes
# zoo: source=https://github.com/EchoseChen/SPA-VL-RLHF/issues/2
import os
os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

seq_len = 157 if rank == 2 else 128
dist.all_reduce(torch.ones(4))
tokens = torch.zeros(2, seq_len)
dist.broadcast(tokens, src=0)
dist.destroy_process_group()
