# zoo: culprit=0 op=get line=26 kind=hang nproc=3 timeout=30
# zoo: about=ranks count the corrupt samples they skip with store.add('skipped', n), and rank 0 logs the total every 4 steps with int(store.get('skipped')); no rank has skipped anything yet at step 4, so the key does not exist and store.get blocks until it appears, while ranks 1 and 2 wait for rank 0 in the next gradient all_reduce and never reach step 10, where their first skip would have created it
# zoo: source=https://github.com/ai-dynamo/nixl/pull/1907
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = dist.distributed_c10d._get_default_store()
torch.manual_seed(rank)
LENGTHS = torch.randint(8, 64, (12, 4))
LENGTHS[9, 2] = -1  # a truncated record further into the shard
model = torch.nn.Linear(4, 1)

for step in range(1, 13):
    lengths = LENGTHS[step - 1]
    ok = lengths > 0
    if not bool(ok.all()):
        store.add("skipped", int((~ok).sum()))
    x = lengths[ok].float().unsqueeze(1).repeat(1, 4) / 64
    model.zero_grad()
    model(x).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    if rank == 0 and step % 4 == 0:
        skipped = int(store.get("skipped"))
        print(f"step {step}: {skipped} corrupt samples skipped so far", flush=True)

dist.barrier()
dist.destroy_process_group()
