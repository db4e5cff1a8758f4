# zoo: culprit=2 op=barrier|all_reduce line=29|25|26 kind=hang nproc=3 timeout=30
# zoo: about=rank 2's eval hits a KeyError on a sample without a label; the helper's finally block still calls dist.barrier() "so nobody is left behind", so rank 2 waits in a barrier while the others wait in the eval all_reduce, and the KeyError is never raised
# zoo: source=https://github.com/ai2cm/ace/pull/1067
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = torch.nn.Linear(4, 3)


def eval_shard(rank):
    samples = [{"x": torch.randn(4), "label": i % 3} for i in range(20)]
    if rank == 2:
        del samples[7]["label"]                     # one unlabeled sample in rank 2's shard
    return samples


def evaluate(model, samples):
    correct = torch.zeros(2)
    try:
        with torch.no_grad():
            for s in samples:
                pred = model(s["x"]).argmax().item()
                correct += torch.tensor([float(pred == s["label"]), 1.0])
        dist.all_reduce(correct)
        return (correct[0] / correct[1]).item()
    finally:
        dist.barrier()                              # keep the ranks together, whatever happened


for epoch in range(2):
    acc = evaluate(model, eval_shard(rank))
    if rank == 0:
        print(f"epoch {epoch} acc {acc:.3f}", flush=True)
dist.destroy_process_group()
