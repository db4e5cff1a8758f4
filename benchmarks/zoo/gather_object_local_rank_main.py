# zoo: culprit=2 op=gather_object line=19|14 kind=exception nodes=2 nproc=2 timeout=30
# zoo: about=predictions are gathered to rank 0 with gather_object, and the helper allocates the output list on "the main process", which it decides from LOCAL_RANK; on the second node global rank 2 is local rank 0, passes a list too, and torch raises there (gather_list must not be specified on non-destination ranks)
# zoo: source=https://github.com/Tencent/PatrickStar/pull/42 (local_rank used where the global rank is needed breaks multi-node runs) https://github.com/pytorch/pytorch/pull/161467 (gather_list must be None on non-destination ranks)
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
LOCAL_RANK = int(os.environ["LOCAL_RANK"]) % 2  # two ranks a node


def is_main_process():
    return LOCAL_RANK == 0


def collect_predictions(preds):
    out = [None] * world if is_main_process() else None
    dist.gather_object(preds, out, dst=0)
    if rank == 0:
        return [p for part in out for p in part]
    return None


model = torch.nn.Linear(8, 3)
preds = model(torch.randn(5, 8)).argmax(1).tolist()
allp = collect_predictions(preds)
if rank == 0:
    print(f"{len(allp)} predictions")
dist.barrier()
dist.destroy_process_group()
