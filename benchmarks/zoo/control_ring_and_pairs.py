# zoo: culprit=none kind=pass nproc=4 timeout=60
# zoo: about=a correct script: every rank creates both pair groups in the same order, reduces in its own pair, then a ring exchange with batch_isend_irecv
# zoo: source=https://github.com/pytorch/pytorch/issues/25390
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
mine = groups[rank // 2]
t = torch.full((8,), float(rank))
dist.all_reduce(t, group=mine)
recv = torch.zeros(8)
ops = [dist.P2POp(dist.isend, t, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
for work in dist.batch_isend_irecv(ops):
    work.wait()
dist.barrier()
dist.destroy_process_group()
