# zoo: culprit=1 op=all_reduce line=16|17|18|19|33|26 kind=hang nproc=3 timeout=30
# zoo: about=an evaluation job reports running metrics at 50% and 100% of each rank's shard; the report points come from walking the shard in steps of 1/len(loader) until the progress equals 1.0 exactly; rank 1's shard has 10 batches, and ten additions of 0.1 give 0.9999999999999999, so the loop never ends (CPU busy in Python) while the others, whose batch counts are powers of two, wait in the all_reduce
# zoo: source=https://github.com/gnudatalanguage/gdl/issues/1276
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
SHARD_BATCHES = [16, 10, 8][rank]
REPORT_AT = (0.5, 1.0)


def report_steps(n_batches):
    # the batch indices at which the shard reaches each REPORT_AT fraction
    steps, progress, i = [], 0.0, 0
    while progress != 1.0:
        progress += 1.0 / n_batches
        i += 1
        if any(abs(progress - f) < 1e-9 for f in REPORT_AT):
            steps.append(i)
    return steps


torch.manual_seed(0)
model = torch.nn.Linear(8, 1).eval()
reports = report_steps(SHARD_BATCHES)
total = torch.zeros(2)
with torch.no_grad():
    for i in range(1, SHARD_BATCHES + 1):
        total += torch.tensor([model(torch.randn(4, 8)).pow(2).mean().item(), 1.0])
        if i in reports:
            stat = total.clone()
            dist.all_reduce(stat)
            if rank == 0:
                print(f"progress report: mse {stat[0].item() / stat[1].item():.3f}", flush=True)

dist.barrier()
dist.destroy_process_group()
