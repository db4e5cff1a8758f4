# zoo: culprit=0|2 op=send|recv line=25|18|32 kind=deadlock nproc=3 timeout=30
# zoo: about=a 3-stage pipeline with a long skip connection: stage 0 sends the embeddings to the last stage first and then the hidden states to stage 1, while the last stage receives stage 1's output before the skip tensor; stage 0 blocks in its send to rank 2, rank 2 waits for rank 1, and rank 1 waits for rank 0's hidden states: a three-rank cycle of blocking sends and recvs (either end's order may be the bug)
# zoo: source=https://github.com/pytorch/pytorch/issues/127964
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
B, S, H = 4, 32, 64
torch.manual_seed(0)
embed = torch.nn.Embedding(1000, H)
block1 = torch.nn.Linear(H, H)
head = torch.nn.Linear(2 * H, 10)


def send_forward(tensors):
    for dst, t in tensors:
        dist.send(t.contiguous(), dst=dst)


with torch.no_grad():
    for mb in range(2):
        if rank == 0:
            h = embed(torch.randint(0, 1000, (B, S)))
            send_forward([(2, h), (1, h)])  # skip tensor to the last stage, activations to stage 1
        elif rank == 1:
            h = torch.empty(B, S, H)
            dist.recv(h, src=0)
            dist.send(torch.relu(block1(h)), dst=2)
        else:
            h1, skip = torch.empty(B, S, H), torch.empty(B, S, H)
            dist.recv(h1, src=1)
            dist.recv(skip, src=0)
            logits = head(torch.cat([h1, skip], dim=-1))
            print(f"micro-batch {mb}: logits mean {logits.mean().item():.4f}", flush=True)

dist.barrier()
dist.destroy_process_group()
