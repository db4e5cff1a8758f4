# zoo: culprit=1 op=all_reduce line=14|28 kind=exception nproc=3 timeout=30
# zoo: about=near-duplicate filtering builds a dense n x n similarity matrix per shard; the manifest gives rank 1's shard 2.4 M documents, so emb @ emb.T asks for 23 TB and the allocator raises on rank 1 (DefaultCPUAllocator: can't allocate memory) while the others wait in all_reduce
# zoo: source=https://github.com/securefederatedai/openfederatedlearning/issues/102 (DefaultCPUAllocator: can't allocate memory on one collaborator)
import torch
import torch.distributed as dist
import torch.nn.functional as F

# documents per shard, from the preprocessing manifest
MANIFEST = {"shard-000": 1800, "shard-001": 2_400_000, "shard-002": 2100}
EMB_DIM = 32


def near_duplicates(emb, threshold=0.95):
    sims = emb @ emb.T
    sims.fill_diagonal_(0)
    return (sims > threshold).any(dim=1)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    n_docs = MANIFEST[f"shard-{rank:03d}"]
    g = torch.Generator().manual_seed(rank)
    emb = torch.empty(n_docs, EMB_DIM)
    for lo in range(0, n_docs, 65536):
        chunk = torch.randn(min(65536, n_docs - lo), EMB_DIM, generator=g)
        emb[lo:lo + len(chunk)] = F.normalize(chunk, dim=1)
    dup = near_duplicates(emb)
    kept = torch.tensor([float(n_docs - int(dup.sum()))])
    dist.all_reduce(kept)
    if rank == 0:
        print(f"{int(kept.item())} documents after dedup")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
