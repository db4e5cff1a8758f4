# zoo: culprit=1 op=destroy_process_group|all_reduce line=27|20 kind=hang nproc=3 timeout=30
# zoo: about=ranks 0 and 1 score held-out batches in an evaluator that owns a [0, 1] group and, when its own batches run out, destroys that group as cleanup; rank 1's held-out shard has one batch where rank 0's has two, so at the second evaluation rank 1 tears the group down and goes on to the next gradient all_reduce, while rank 0 waits for it in the destroyed group's all_reduce for ever (and rank 2 with rank 1 in the gradient all_reduce)
# zoo: source=https://github.com/pytorch/pytorch/pull/122358
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
HELD_OUT = {0: [[3, 1, 2], [5, 4, 0]], 1: [[2, 2, 6]], 2: []}[rank]


class Evaluator:
    def __init__(self, batches):
        self.batches = iter(batches)
        self.group = dist.new_group([0, 1])

    def evaluate(self):
        batch = next(self.batches, None)
        if batch is None:
            self.close()
            return None
        score = torch.tensor([float(sum(batch)), float(len(batch))])
        dist.all_reduce(score, group=self.group)
        return (score[0] / score[1]).item()

    def close(self):
        dist.destroy_process_group(self.group)


evaluator = Evaluator(HELD_OUT)
for step in range(1, 9):
    grad = torch.full((64,), float(rank))
    dist.all_reduce(grad)
    if step % 3 == 0 and rank in (0, 1):
        score = evaluator.evaluate()
        if rank == 0:
            print(f"step {step}: eval score {score}", flush=True)

dist.barrier()
dist.destroy_process_group()
