# zoo: culprit=0 op=new_group|all_reduce line=17|35|22 kind=hang nproc=3 timeout=30
# zoo: about=the metrics logger creates its reduction group lazily, on first use; only rank 0 logs, so only rank 0 calls dist.new_group, which every rank of the world must enter: rank 0 waits there while ranks 1 and 2 wait for it in the next gradient all_reduce
# zoo: source=https://github.com/vllm-project/llm-compressor/pull/2869 (new_group is collective over WORLD: called by some ranks only, it hangs) https://github.com/pytorch/pytorch/issues/25390
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


class MetricLogger:
    def __init__(self):
        self._group = None

    def group(self):
        if self._group is None:                       # created on first use, to keep start-up fast
            self._group = dist.new_group(list(range(world)))
        return self._group

    def log(self, step, loss):
        t = torch.tensor([loss])
        dist.all_reduce(t, group=self.group())
        print(f"step {step} loss {t.item() / world:.4f}", flush=True)


logger = MetricLogger()
model = torch.nn.Linear(8, 1)
for step in range(4):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
    if rank == 0 and step % 2 == 0:
        logger.log(step, loss.item())
dist.destroy_process_group()
