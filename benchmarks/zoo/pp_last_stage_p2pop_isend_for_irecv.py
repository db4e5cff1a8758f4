# zoo: culprit=3 op=batch_isend_irecv|isend line=16|26|27 kind=deadlock nproc=4 timeout=30
# zoo: about=a 4-stage pipeline in steady state exchanges with its neighbours in one batch_isend_irecv per micro-batch (activations forward, gradients backward); the last stage builds its own op list, copied from the send line, and posts isend where it means irecv for the incoming activations, so it sends stage 2 two messages and receives none: stage 2's activation send is never received, both wait in the batch, and stage 1 then waits for stage 2
# zoo: source=https://github.com/NVIDIA/Megatron-LM/pull/1451
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
stage, n_stages = dist.get_rank(), dist.get_world_size()
MB, HIDDEN = 32, 512
torch.manual_seed(stage)
w = torch.randn(HIDDEN, HIDDEN) / HIDDEN ** 0.5


def p2p_ops(act_out, grad_out, act_in, grad_in):
    if stage == n_stages - 1:                   # last stage: activations in, gradients out
        return [dist.P2POp(dist.isend, act_in, stage - 1), dist.P2POp(dist.isend, grad_out, stage - 1)]
    ops = [dist.P2POp(dist.isend, act_out, stage + 1), dist.P2POp(dist.irecv, grad_in, stage + 1)]
    if stage > 0:
        ops += [dist.P2POp(dist.irecv, act_in, stage - 1), dist.P2POp(dist.isend, grad_out, stage - 1)]
    return ops


act_out, grad_out = torch.randn(MB, HIDDEN), torch.zeros(MB, HIDDEN)
for micro_batch in range(4):
    act_in, grad_in = torch.empty(MB, HIDDEN), torch.empty(MB, HIDDEN)
    for req in dist.batch_isend_irecv(p2p_ops(act_out, grad_out, act_in, grad_in)):
        req.wait()
    act_out = torch.tanh((act_in if stage > 0 else torch.randn(MB, HIDDEN)) @ w)
    grad_out = (grad_in if stage < n_stages - 1 else act_out) @ w.T
dist.barrier()
dist.destroy_process_group()
