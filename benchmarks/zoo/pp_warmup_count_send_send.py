# zoo: culprit=0 op=send line=14|19 kind=deadlock nproc=2 timeout=30
# zoo: about=a two-stage 1F1B pipeline: stage 0 computes its warm-up count as num_stages instead of num_stages - 1 - stage, so it sends a second micro-batch's activations before receiving the first gradient, while stage 1 is sending that gradient back: both block in send
# zoo: source=https://github.com/pytorch/PiPPy/issues/969
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
stage, n_stages = dist.get_rank(), dist.get_world_size()
N_MICRO, MB, H = 4, 8, 32
torch.manual_seed(stage)
layer = torch.nn.Linear(H, H)

if stage == 0:
    num_warmup = min(n_stages, N_MICRO)                  # should be n_stages - 1 - stage
    inputs = [torch.randn(MB, H) for _ in range(N_MICRO)]
    outputs, sent, grads_back = [], 0, 0
    for _ in range(num_warmup):
        outputs.append(layer(inputs[sent]))
        dist.send(outputs[-1].detach(), dst=1)
        sent += 1
    while grads_back < N_MICRO:
        grad = torch.empty(MB, H)
        dist.recv(grad, src=1)
        outputs[grads_back].backward(grad)
        grads_back += 1
        if sent < N_MICRO:
            outputs.append(layer(inputs[sent]))
            dist.send(outputs[-1].detach(), dst=1)
            sent += 1
else:
    for i in range(N_MICRO):
        act = torch.empty(MB, H, requires_grad=True)
        dist.recv(act.data, src=0)
        layer(act).pow(2).mean().backward()
        dist.send(act.grad, dst=0)
print(f"stage {stage} done", flush=True)
dist.destroy_process_group()
