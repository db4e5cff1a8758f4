# zoo: culprit=none kind=pass nproc=4 timeout=90
# zoo: about=a correct script: rank 0 broadcasts the run config as an object, a 4-stage pipeline passes activations with irecv/isend (every work waited, one batch_isend_irecv per peer), the last two stages reduce the loss in a subgroup every rank created, and a store key marks the end
# zoo: source=https://github.com/pytorch/PiPPy/pull/1000 (one batch_isend_irecv per peer, the fix for the skip-connection hang)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = dist.distributed_c10d._get_default_store()

cfg = [{"micro_batches": 4, "hidden": 16} if rank == 0 else None]
dist.broadcast_object_list(cfg, src=0)
cfg = cfg[0]
tail_group = dist.new_group([2, 3])           # every rank calls new_group, in the same order

torch.manual_seed(rank)
stage = torch.nn.Linear(cfg["hidden"], cfg["hidden"])
losses = []
with torch.no_grad():
    for mb in range(cfg["micro_batches"]):
        if rank == 0:
            h = torch.randn(2, cfg["hidden"])
        else:
            h = torch.empty(2, cfg["hidden"])
            dist.irecv(h, src=rank - 1).wait()
        out = torch.relu(stage(h)).contiguous()
        if rank < world - 1:
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, out, rank + 1)]):
                work.wait()
        else:
            losses.append(out.pow(2).mean())
if rank in (2, 3):
    total = torch.stack(losses).sum().reshape(1) if losses else torch.zeros(1)
    dist.all_reduce(total, group=tail_group)
if rank == world - 1:
    store.set("pipeline-done", "1")
store.wait(["pipeline-done"])
dist.barrier()
dist.destroy_process_group()
