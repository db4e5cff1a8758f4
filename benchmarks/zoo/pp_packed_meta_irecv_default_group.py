# zoo: culprit=3 op=batch_isend_irecv line=27|42 kind=exception nproc=4 timeout=30
# zoo: about=two 2-stage pipelines ([0, 1] and [2, 3]) pass activations with batch_isend_irecv on their pipeline group; for packed-sequence batches the boundary-offsets tensor travels too, but the receive helper builds that P2POp without group=, so on the packed pipeline's last stage (rank 3) the op list mixes the default group with the pipeline group and batch_isend_irecv raises ValueError, while rank 2 waits for its sends
# zoo: source=https://github.com/pytorch/tensordict/issues/615
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
PIPES = [[0, 1], [2, 3]]
pp_groups = [dist.new_group(p) for p in PIPES]
pipe, stage = rank // 2, rank % 2
pp = pp_groups[pipe]
PACKED = [False, True][pipe]
MB, S, H = 2, 8, 16


def send_ops(act, offsets):
    ops = [dist.P2POp(dist.isend, act, rank + 1, group=pp)]
    if offsets is not None:
        ops.append(dist.P2POp(dist.isend, offsets, rank + 1, group=pp))
    return ops


def recv_ops(act_buf, offsets_buf):
    ops = [dist.P2POp(dist.irecv, act_buf, rank - 1, group=pp)]
    if offsets_buf is not None:
        ops.append(dist.P2POp(dist.irecv, offsets_buf, rank - 1))
    return ops


torch.manual_seed(pipe)
for step in range(3):
    if stage == 0:
        act = torch.randn(MB, S, H)
        offsets = torch.tensor([0, 3, 8]) if PACKED else None
        for w in dist.batch_isend_irecv(send_ops(act, offsets)):
            w.wait()
        loss = torch.zeros(1)
    else:
        act = torch.empty(MB, S, H)
        offsets = torch.empty(3, dtype=torch.long) if PACKED else None
        for w in dist.batch_isend_irecv(recv_ops(act, offsets)):
            w.wait()
        loss = act.pow(2).mean().reshape(1)
    dist.all_reduce(loss)

dist.barrier()
dist.destroy_process_group()
