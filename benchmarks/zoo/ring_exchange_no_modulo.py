# zoo: culprit=2 op=batch_isend_irecv|isend line=13|14|15|16 kind=hang nproc=3 timeout=30
# zoo: about=a ring halo exchange computes the next peer as rank + 1 without the modulo: the last rank's send targets a rank that does not exist and the ring hangs
# zoo: source=https://github.com/pytorch/pytorch/issues/128665 https://github.com/hpc/libcircle/pull/10
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

send_buf = torch.full((4,), float(rank))
recv_buf = torch.zeros(4)
prev_rank = (rank - 1) % world
next_rank = rank + 1
ops = [dist.P2POp(dist.isend, send_buf, next_rank), dist.P2POp(dist.irecv, recv_buf, prev_rank)]
for work in dist.batch_isend_irecv(ops):
    work.wait()
print(rank, recv_buf)
dist.destroy_process_group()
