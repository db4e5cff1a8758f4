# zoo: culprit=1 op=irecv line=27|22 kind=silent nproc=2 timeout=30
# zoo: about=the last pipeline stage prefetches every micro-batch's activations with irecv into a ring of receive buffers sized like the warm-up depth (num_stages - stage_id, so one buffer on the last stage); all four outstanding irecvs write into the same tensor, every micro-batch is computed on the last one's activations, and the run completes with a wrong loss
# zoo: source=https://github.com/deepspeedai/DeepSpeed/issues/2800
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
N_STAGES, N_MICRO, MB, H = 2, 4, 8, 32
stage = rank
torch.manual_seed(0)
first = torch.nn.Linear(16, H)
last = torch.nn.Linear(H, 1)
inputs = torch.randn(N_MICRO, MB, 16)
targets = torch.randn(N_MICRO, MB, 1)

with torch.no_grad():
    if stage == 0:
        for mb in range(N_MICRO):
            dist.send(first(inputs[mb]), dst=1)
    else:
        n_buffers = min(N_STAGES - stage, N_MICRO)
        buffers = [torch.empty(MB, H) for _ in range(n_buffers)]
        reqs, acts = [], []
        for mb in range(N_MICRO):
            buf = buffers[mb % n_buffers]
            reqs.append(dist.irecv(buf, src=0))
            acts.append(buf)
        for r in reqs:
            r.wait()
        losses = [(last(a) - targets[mb]).pow(2).mean() for mb, a in enumerate(acts)]
        print(f"micro-batch losses {[round(l.item(), 4) for l in losses]}", flush=True)
    total = torch.tensor([sum(l.item() for l in losses) if stage == 1 else 0.0])
    dist.all_reduce(total)

dist.barrier()
dist.destroy_process_group()
