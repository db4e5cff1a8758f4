# zoo: culprit=0 op=send line=29|28|27 kind=hang nproc=2 timeout=30
# zoo: about=a two-stage pipeline forwards each micro-batch's hidden states and then, when the batch is padded, its attention mask (tag 1); the last stage always receives a mask, so at the third micro-batch, whose sequences all have the same length and need no mask, stage 0 skips the mask send and goes on to send the next micro-batch's hidden states, while rank 1 waits in recv for the missing mask: rank 0's send and rank 1's recv (different tags) wait for each other for ever
# zoo: source=https://github.com/alibaba/Pai-Megatron-Patch/pull/379
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
B, S, H = 4, 16, 32
SEQ_LENS = [[16, 12, 9, 16], [7, 16, 16, 11], [16, 16, 16, 16], [5, 16, 13, 16]]
torch.manual_seed(0)
embed = torch.nn.Embedding(100, H)
head = torch.nn.Linear(H, 2)


def make_batch(lens):
    ids = torch.randint(1, 100, (B, S))
    mask = torch.arange(S)[None, :] < torch.tensor(lens)[:, None]
    ids[~mask] = 0
    return ids, (None if bool(mask.all()) else mask.long())


with torch.no_grad():
    for mb, lens in enumerate(SEQ_LENS):
        if rank == 0:
            ids, mask = make_batch(lens)
            dist.send(embed(ids), dst=1, tag=0)
            if mask is not None:
                dist.send(mask, dst=1, tag=1)
        else:
            hidden = torch.empty(B, S, H)
            dist.recv(hidden, src=0, tag=0)
            mask = torch.empty(B, S, dtype=torch.long)
            dist.recv(mask, src=0, tag=1)
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            print(f"micro-batch {mb}: logits {head(pooled)[0].tolist()}", flush=True)

dist.barrier()
dist.destroy_process_group()
