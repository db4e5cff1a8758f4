# zoo: culprit=2 op=all_reduce line=30|32|10 kind=straggler nproc=4 timeout=60
# zoo: about=the trainer's memory-debug mode runs a full gc.collect() after every micro-batch; rank 2's node exports TRAIN_GC_DEBUG=1 from a leak hunt, and with a half-million-record document index on the heap each collection takes tens of milliseconds, so rank 2 arrives last at every gradient all_reduce and the others wait for it; the run passes, slowly
# zoo: source=https://github.com/pytorch/torchtitan/pull/4296
import gc
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
NODE_ENV = [{}, {}, {"TRAIN_GC_DEBUG": "1"}, {}][rank]
GC_DEBUG = NODE_ENV.get("TRAIN_GC_DEBUG", "0") == "1"


class DocRecord:
    def __init__(self, i):
        self.doc_id = i
        self.spans = [i * 7 % 4096, i * 13 % 512]


index = [DocRecord(i) for i in range(500_000)]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(15):
    for micro in range(4):
        rec = index[(step * 4 + micro) * 997 % len(index)]
        x = torch.randn(16, 32) + rec.spans[1] / 512
        model(x).pow(2).mean().backward()
        if GC_DEBUG:
            gc.collect()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    opt.zero_grad()

dist.barrier()
if rank == 0:
    print("training done", flush=True)
dist.destroy_process_group()
