# zoo: culprit=1 op=all_reduce line=15|31|37 kind=hang nproc=3 timeout=30
# zoo: about=each rank starts one reader thread per shard file, capped at NUM_READERS, and the main thread waits with its readers on a threading.Barrier(NUM_READERS + 1) before every epoch; rank 1's shard has only two files, so only two readers start, the barrier never fills and rank 1 waits for ever while the others wait in the first gradient all_reduce
# zoo: source=https://github.com/JuliaFolds2/OhMyThreads.jl/pull/97
import queue
import threading
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
NUM_READERS = 3
SHARD_FILES = [["a0", "a1", "a2", "a3"], ["b0", "b1"], ["c0", "c1", "c2"]][rank]
EPOCHS = 2
batches = queue.Queue()
epoch_start = threading.Barrier(NUM_READERS + 1)


def reader(files):
    for epoch in range(EPOCHS):
        epoch_start.wait()
        for name in files:
            batches.put(torch.full((8, 16), float(len(name) + epoch)))


n_threads = min(NUM_READERS, len(SHARD_FILES))
for i in range(n_threads):
    threading.Thread(target=reader, args=(SHARD_FILES[i::n_threads],), daemon=True).start()

model = torch.nn.Linear(16, 1)
for epoch in range(EPOCHS):
    epoch_start.wait()
    for _ in range(2):
        x = batches.get()
        model.zero_grad()
        model(x).mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)

dist.barrier()
dist.destroy_process_group()
