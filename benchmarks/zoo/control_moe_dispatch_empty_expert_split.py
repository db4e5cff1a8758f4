# zoo: culprit=none kind=pass nproc=3 timeout=60
# zoo: about=a correct MoE dispatch that looks risky: rank 1's router sends no token to the last expert, but the counts come from torch.bincount(..., minlength=world), so every rank passes world-size split lists (some zero) to all_to_all_single and the exchange completes
# zoo: source=https://github.com/XPU-Forces/mojo_opset/pull/345 (bincount needs minlength when some expert ids are absent)
import torch
import torch.distributed as dist

DIM = 16


def dispatch(x, expert_idx):
    order = torch.argsort(expert_idx)
    send_counts = torch.bincount(expert_idx, minlength=dist.get_world_size())
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
