# zoo: culprit=3 op=all_reduce line=14|16|50 kind=hang nproc=4 timeout=40
# zoo: about=gradient clipping with expert parallelism: the expert part of the norm is all_reduced over the rank's expert group [2, 3] only when the rank has expert gradients; at step 1 no token of rank 3's batch is routed to its expert (zero_grad set the grads to None), so rank 3 skips the group all_reduce and goes on to the final barrier while rank 2 waits in it
# zoo: source=https://github.com/deepspeedai/DeepSpeed/pull/8478 (an expert with no tokens made a rank skip the expert-group norm reduction: deadlock)
import torch
import torch.distributed as dist

DIM = 16
ROUTE_THRESHOLD = 1.0


def clip_grad_norm_(dense_params, expert_params, ep_group, max_norm=1.0):
    sq = sum(p.grad.pow(2).sum() for p in dense_params)  # dense grads are already averaged
    expert_grads = [p.grad for p in expert_params if p.grad is not None]
    if expert_grads:
        expert_sq = sum(g.pow(2).sum() for g in expert_grads)
        dist.all_reduce(expert_sq, group=ep_group)
        sq = sq + expert_sq
    total = sq.sqrt()
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in [p.grad for p in dense_params] + expert_grads:
        g.mul_(coef)
    return total


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ep_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    ep_group = ep_groups[rank // 2]
    torch.manual_seed(0)
    dense = torch.nn.Linear(DIM, DIM)
    torch.manual_seed(100 + rank)
    expert = torch.nn.Linear(DIM, DIM)  # one expert per rank
    params = list(dense.parameters()) + list(expert.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    g = torch.Generator().manual_seed(30 + rank)
    for step in range(2):
        x = torch.randn(8, DIM, generator=g)
        h = dense(x)
        routed = x[:, 0] > ROUTE_THRESHOLD
        out = h.clone()
        if routed.any():
            out[routed] = out[routed] + expert(h[routed])
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in dense.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        norm = clip_grad_norm_(list(dense.parameters()), list(expert.parameters()), ep_group)
        opt.step()
        if rank == 0:
            print(f"step {step} grad norm {norm.item():.4f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
