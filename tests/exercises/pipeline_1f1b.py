"""Reference: one 1F1B training step of a pipeline, stage r on rank r. Activations go
forward and gradients back with isend (kept until the end) and recv; stage r runs
n - r - 1 warm-up forwards, then one forward and one backward in turn, then the backwards
left. Tests only."""
import torch
import torch.distributed as dist


def pipeline_1f1b(stage, microbatches, targets):
    rank, n = dist.get_rank(), dist.get_world_size()
    m = len(microbatches)
    inputs, outputs, sent = {}, {}, []

    def forward(k):
        if rank == 0:
            x = microbatches[k]
        else:
            x = torch.empty_like(microbatches[k])
            dist.recv(x, rank - 1)
            x.requires_grad_()
        y = stage(x)
        inputs[k] = x
        if rank == n - 1:
            outputs[k] = torch.nn.functional.mse_loss(y, targets[k]) / m
        else:
            outputs[k] = y
            activation = y.detach()
            sent.append((activation, dist.isend(activation, rank + 1)))

    def backward(k):
        if rank == n - 1:
            outputs.pop(k).backward()
        else:
            grad = torch.empty_like(outputs[k])
            dist.recv(grad, rank + 1)
            outputs.pop(k).backward(grad)
        x = inputs.pop(k)
        if rank > 0:
            sent.append((x.grad, dist.isend(x.grad, rank - 1)))

    warmup = min(n - rank - 1, m)
    for k in range(warmup):
        forward(k)
    for i in range(m - warmup):
        forward(warmup + i)
        backward(i)
    for i in range(m - warmup, m):
        backward(i)
    for _, request in sent:
        request.wait()
