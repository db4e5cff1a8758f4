# zoo: culprit=2 op=all_gather line=24|13 kind=abort nproc=3 timeout=30
# zoo: about=the eval loop gathers each rank's predictions with all_gather, each rank sizing the gather by its own shard; 8 samples over 3 ranks leave rank 2 with 2 where the others have 3
# zoo: source=https://github.com/huggingface/accelerate/issues/167
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)
model = torch.nn.Linear(4, 5)
eval_x = torch.randn(8, 4)                    # 8 samples, no padding of the last shard
my_x = eval_x[rank::world]                    # ranks 0, 1: 3 samples; rank 2: 2


def evaluate():
    with torch.no_grad():
        return model(my_x).argmax(dim=1)


dist.barrier()
preds = evaluate()
gathered = [torch.zeros_like(preds) for _ in range(world)]
dist.all_gather(gathered, preds)              # sized from the local shard, not padded
if rank == 0:
    print("accuracy proxy", torch.cat(gathered).float().mean().item())
dist.destroy_process_group()
