# zoo: culprit=0 op=save line=27|26 kind=hang nproc=2 timeout=40
# zoo: about=the checkpoint is written with torch.distributed.checkpoint.save under 'rank == 0' as with torch.save; dcp.save is collective (it gathers the save plans), so rank 0 waits in it while rank 1 is in the next step's gradient all_reduce
# zoo: source=https://github.com/deepspeedai/DeepSpeed/pull/801 (save_checkpoint must be called on all ranks; calling it on rank 0 hangs)
import os
import tempfile
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    root = [tempfile.mkdtemp(prefix="dcp-") if rank == 0 else None]
    dist.broadcast_object_list(root, src=0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(4):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if step % 2 == 1 and rank == 0:
            dcp.save({"model": model.state_dict()}, checkpoint_id=os.path.join(root[0], f"step-{step}"))
            print(f"saved step {step}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
