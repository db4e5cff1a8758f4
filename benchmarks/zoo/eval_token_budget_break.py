# zoo: culprit=2 op=all_reduce|barrier line=24|27|35 kind=hang nproc=3 timeout=30
# zoo: about=evaluation stops at a token budget counted on each rank's own batches: rank 2's sequences are longer, so it breaks out of the loop first and skips the per-batch all_reduce the others still call
# zoo: source=https://github.com/lifeiteng/vall-e/pull/93
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

EVAL_TOKEN_BUDGET = 96
torch.manual_seed(0)
model = torch.nn.Embedding(50, 8)
seq_len = 48 if rank == 2 else 16            # rank 2's shard holds the long documents
eval_batches = [torch.randint(0, 50, (2, seq_len)) for _ in range(5)]


def evaluate():
    totals = torch.zeros(2)
    seen = 0
    with torch.no_grad():
        for batch in eval_batches:
            loss = model(batch).pow(2).mean()
            stats = torch.tensor([loss.item() * batch.numel(), float(batch.numel())])
            dist.all_reduce(stats)
            totals += stats
            seen += batch.numel()
            if seen >= EVAL_TOKEN_BUDGET:     # the bug: a local count decides when to stop
                break
    return (totals[0] / totals[1]).item()


val_loss = evaluate()
if rank == 0:
    print("val loss", val_loss)
dist.barrier()
dist.destroy_process_group()
