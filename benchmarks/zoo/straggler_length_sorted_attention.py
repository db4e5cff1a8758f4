# zoo: culprit=2 op=all_reduce line=31|25|33 kind=straggler nproc=3 timeout=60
# zoo: about=the documents are sorted by length and cut into contiguous per-rank ranges to keep padding low, so rank 2 gets the longest sequences and its quadratic attention takes about 5x rank 0's time every step; it is last at every all_reduce and the run passes
# zoo: source=https://github.com/NVIDIA/Megatron-LM/pull/2282 (DP rank imbalance from sequence lengths: attention is quadratic)
import torch
import torch.distributed as dist

DIM, HEADS = 64, 4


def attention(x, wq, wk, wv):
    b, n, d = x.shape
    q = (x @ wq).view(b, n, HEADS, d // HEADS).transpose(1, 2)
    k = (x @ wk).view(b, n, HEADS, d // HEADS).transpose(1, 2)
    v = (x @ wv).view(b, n, HEADS, d // HEADS).transpose(1, 2)
    att = torch.softmax(q @ k.transpose(-1, -2) / (d // HEADS) ** 0.5, dim=-1)
    return (att @ v).transpose(1, 2).reshape(b, n, d)


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    doc_lens = sorted(torch.randint(128, 2048, (300,), generator=g).tolist())
    shard = doc_lens[rank * 100:(rank + 1) * 100]  # contiguous length ranges keep padding low
    seq = max(shard)
    torch.manual_seed(0)
    w = [torch.randn(DIM, DIM) / DIM ** 0.5 for _ in range(3)]
    for step in range(12):
        x = torch.randn(2, seq, DIM)
        out = attention(x, *w)
        stat = out.pow(2).mean().reshape(1)
        dist.all_reduce(stat)
        if rank == 0:
            print(f"step {step} seq {seq} stat {stat.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
