# zoo: culprit=1 op=new_group|all_reduce line=19|41|22 kind=timeout nproc=3 timeout=40
# zoo: about=the evaluation group takes its timeout from the node's EVAL_COLLECTIVE_TIMEOUT, documented in minutes, but the helper builds timedelta(seconds=...); rank 1's node sets it to 3, so its eval group times out after 3 s, and at the first evaluation, while rank 0 is still writing its checkpoint (about 6 s), rank 1's eval all_reduce raises a gloo timeout
# zoo: source=https://github.com/ai-dynamo/dynamo/pull/14718
import io
import time
from datetime import timedelta
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
NODE_ENV = [{}, {"EVAL_COLLECTIVE_TIMEOUT": "3"}, {}][rank]


def eval_group_timeout():
    minutes = NODE_ENV.get("EVAL_COLLECTIVE_TIMEOUT")
    if minutes is None:
        return timedelta(minutes=30)
    return timedelta(seconds=float(minutes))


eval_group = dist.new_group(list(range(world)), timeout=eval_group_timeout())
model = torch.nn.Linear(32, 4)


def save_checkpoint(step):
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    time.sleep(6.0)  # the upload to the shared filesystem takes a few seconds


for step in range(1, 5):
    model.zero_grad()
    model(torch.randn(8, 32)).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    if step % 2 == 0:
        if rank == 0:
            save_checkpoint(step)
        acc = torch.tensor([0.7 + 0.01 * rank])
        dist.all_reduce(acc, group=eval_group)

dist.barrier()
dist.destroy_process_group()
