# zoo: culprit=0|1 op=recv|send line=25|18 kind=deadlock nproc=2 timeout=30
# zoo: about=the first stage sends the activations (tag 0) then the labels (tag 1); the last stage posts the recv for the labels first: gloo's blocking send of the 4 MB activations waits for a matching recv that rank 1 posts only after its labels arrive (either side's order may be the bug)
# zoo: source=https://github.com/pytorch/pytorch/issues/125079 (tags do not make out-of-order blocking send/recv work)
import torch
import torch.distributed as dist
import torch.nn.functional as F

ACT_TAG, LABEL_TAG = 0, 1
BATCH, SEQ, DIM = 8, 512, 256


def first_stage(model, step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(BATCH, SEQ, DIM, generator=g)
    labels = torch.randint(0, 16, (BATCH, SEQ), generator=g)
    with torch.no_grad():
        act = model(x)
    dist.send(act, dst=1, tag=ACT_TAG)
    dist.send(labels, dst=1, tag=LABEL_TAG)


def last_stage(model, step):
    labels = torch.empty(BATCH, SEQ, dtype=torch.long)
    act = torch.empty(BATCH, SEQ, DIM)
    dist.recv(labels, src=0, tag=LABEL_TAG)
    dist.recv(act, src=0, tag=ACT_TAG)
    with torch.no_grad():
        loss = F.cross_entropy(model(act).flatten(0, 1), labels.flatten())
    print(f"step {step} eval loss {loss.item():.4f}")


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(DIM, DIM) if rank == 0 else torch.nn.Linear(DIM, 16)
    for step in range(3):
        if rank == 0:
            first_stage(model, step)
        else:
            last_stage(model, step)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
