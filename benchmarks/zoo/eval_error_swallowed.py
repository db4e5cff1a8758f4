# zoo: culprit=2 op=all_reduce|gather_object line=20|28|33|17 kind=hang nproc=4 timeout=30
# zoo: about=an eval harness catches a task's exception, logs it and goes on, so torchrun never sees a failure to restart or stop on; rank 2 hits a malformed sample in its shard of the second task and skips that task's all_reduce, then waits in gather_object while the others reduce
# zoo: source=https://github.com/EvolvingLMMs-Lab/lmms-eval/pull/1304
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

TASKS = ["arc", "mmlu", "gsm8k"]
torch.manual_seed(rank)


def evaluate(task):
    samples = [{"answer": i % 4} for i in range(8)]
    if task == "mmlu" and rank == 2:
        del samples[5]["answer"]              # a malformed record in rank 2's shard
    correct = sum(int(torch.randint(0, 4, ()).item() == s["answer"]) for s in samples)
    stats = torch.tensor([float(correct), float(len(samples))])
    dist.all_reduce(stats)
    return (stats[0] / stats[1]).item()


results = {}
for task in TASKS:
    try:
        results[task] = evaluate(task)
    except Exception as e:                    # the bug: the rank goes on as if nothing happened
        print(f"rank {rank}: task {task} failed: {e!r}")
        results[task] = None

everyone = [None] * world if rank == 0 else None
dist.gather_object(results, everyone, dst=0)
if rank == 0:
    print(everyone)
dist.destroy_process_group()
