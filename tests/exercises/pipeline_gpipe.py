"""Classic mistake: GPipe's order under 1F1B's name. Every microbatch forward, then every
one backward: right gradients, the same messages, but stage r holds all M activations at
once where 1F1B holds n - r. Tests only: the schedule check must fail it."""
import torch
import torch.distributed as dist


def pipeline_1f1b(stage, microbatches, targets):
    rank, n = dist.get_rank(), dist.get_world_size()
    m = len(microbatches)
    inputs, outputs, sent = [], [], []
    for k in range(m):
        if rank == 0:
            x = microbatches[k]
        else:
            x = torch.empty_like(microbatches[k])
            dist.recv(x, rank - 1)
            x.requires_grad_()
        y = stage(x)
        inputs.append(x)
        if rank == n - 1:
            outputs.append(torch.nn.functional.mse_loss(y, targets[k]) / m)
        else:
            outputs.append(y)
            sent.append((y.detach(), dist.isend(y.detach(), rank + 1)))
    for k in range(m):
        if rank == n - 1:
            outputs[k].backward()
        else:
            grad = torch.empty_like(outputs[k])
            dist.recv(grad, rank + 1)
            outputs[k].backward(grad)
        if rank > 0:
            sent.append((inputs[k].grad, dist.isend(inputs[k].grad, rank - 1)))
    for _, request in sent:
        request.wait()
