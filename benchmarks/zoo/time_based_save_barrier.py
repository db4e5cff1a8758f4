# zoo: culprit=1 op=gather_object line=29|45|44 kind=hang nproc=3 timeout=40
# zoo: about=the trainer saves a checkpoint every SAVE_EVERY_S seconds of wall clock, each rank reading its own clock, started once its own data index is built; rank 1's node has the index cached and starts its timer 3 s before the others, so its timer fires first and it enters the save's gather_object (each rank's optimizer state to rank 0) while the others are in the next gradient all_reduce
# zoo: source=https://github.com/microsoft/superbenchmark/pull/347 (a duration limit checked on each rank's own clock: some rank enters one more step and never finishes; fixed with an all_reduce of the decision)
import time
import torch
import torch.distributed as dist

SAVE_EVERY_S = 4.0

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def build_index(n_files, cached):
    if not cached:
        time.sleep(0.01 * n_files)  # list and stat every file of the shard
    return list(range(n_files))


index = build_index(300, cached=(rank == 1))  # rank 1's node kept the index from the last run
last_save = time.monotonic()  # the save timer starts once this rank's data is ready
dist.barrier()
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def save_checkpoint(step):
    states = [None] * world if rank == 0 else None
    dist.gather_object(opt.state_dict(), states, dst=0)
    if rank == 0:
        torch.save({"model": model.state_dict(), "optim": states}, f"/tmp/zoo_tb_ckpt_{step}.pt")
    dist.barrier()


for step in range(40):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    opt.zero_grad()
    time.sleep(0.2)
    if time.monotonic() - last_save > SAVE_EVERY_S:
        save_checkpoint(step)
        last_save = time.monotonic()
print(f"rank {rank} done")
dist.destroy_process_group()
