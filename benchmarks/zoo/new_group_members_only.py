# zoo: culprit=2 op=new_group|all_reduce line=17|24|26 kind=hang nproc=3 timeout=40
# zoo: about=the evaluation group [0, 1] is created only on its members (new_group under if rank in ranks); rank 2's group counter falls one behind, so the next group, which every rank creates, is named differently on rank 2 and the groups' members never meet
# zoo: source=https://github.com/deepspeedai/Megatron-DeepSpeed/issues/338
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

EVAL_RANKS = [0, 1]                           # rank 2 keeps training while the others evaluate
grad = torch.ones(32)
dist.all_reduce(grad)


def make_eval_group():
    if rank in EVAL_RANKS:
        return dist.new_group(EVAL_RANKS)     # the bug: non-members must call it too
    return None


eval_group = make_eval_group()
if eval_group is not None:
    dist.all_reduce(torch.tensor([float(rank)]), group=eval_group)
log_group = dist.new_group([1, 2])            # every rank calls this one
if rank in (1, 2):
    dist.all_reduce(torch.ones(4), group=log_group)
dist.all_reduce(grad)
dist.destroy_process_group()
