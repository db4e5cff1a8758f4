# zoo: culprit=1 op=all_to_all_single line=14|12 kind=exception nproc=3 timeout=30
# zoo: about=MoE dispatch counts tokens per expert with torch.bincount(expert_idx) and no minlength; rank 1's router sends nothing to the last expert, so its count vector has 2 entries for 3 ranks and its all_to_all_single of the counts raises in gloo (size not divisible by the group), the others lose it
# zoo: source=https://github.com/XPU-Forces/mojo_opset/pull/345 (bincount without minlength when some expert ids are absent)
import torch
import torch.distributed as dist

DIM = 16


def dispatch(x, expert_idx):
    order = torch.argsort(expert_idx)
    send_counts = torch.bincount(expert_idx)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    out = x.new_empty(int(recv_counts.sum()), x.shape[1])
    dist.all_to_all_single(out, x[order], recv_counts.tolist(), send_counts.tolist())
    return out, order, send_counts, recv_counts


def combine(y, order, send_counts, recv_counts):
    back = y.new_empty(int(send_counts.sum()), y.shape[1])
    dist.all_to_all_single(back, y, send_counts.tolist(), recv_counts.tolist())
    out = torch.empty_like(back)
    out[order] = back
    return out


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1)
    router = torch.nn.Linear(DIM, dist.get_world_size())
    expert = torch.nn.Linear(DIM, DIM)
    g = torch.Generator().manual_seed(18 + rank)
    with torch.no_grad():
        for step in range(2):
            x = torch.randn(8, DIM, generator=g)
            expert_idx = router(x).argmax(-1)
            tokens, order, sc, rc = dispatch(x, expert_idx)
            y = combine(expert(tokens), order, sc, rc)
            print(f"rank {rank} step {step}: {tuple(y.shape)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
