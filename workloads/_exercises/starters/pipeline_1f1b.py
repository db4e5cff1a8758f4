"""Exercise pipeline_1f1b: one training step of a pipeline in the 1F1B order, stage r on
rank r (docs/patterns.md, pp): activations go forward and gradients come back by
send/recv, and each stage alternates one forward and one backward once it is warm.

Check it on the lab:   labctl exercise check pipeline_1f1b THIS_FILE

The contract
    pipeline_1f1b(stage, microbatches, targets) is called by every rank at once. The
    model is the chain stage 0 -> stage 1 -> ... -> stage n-1; `stage` is this rank's
    (a torch.nn.Module taking and giving tensors of one shape, (rows, width), float32).
    `microbatches` is a list of M tensors of that shape: on rank 0 the inputs, on every
    other rank buffers of the right shape holding garbage (receive into them or into
    torch.empty_like of them). `targets` is the list of M targets on the last rank and
    None elsewhere. The step's loss is the mean over the microbatches of
    torch.nn.functional.mse_loss(chain output, target): backward of
    mse_loss(y_k, targets[k]) / M for each microbatch k. When your function returns,
    every parameter of every stage holds in .grad the gradient of that loss (as the
    whole chain in one process would), the parameters and the inputs unchanged.
    Use point-to-point ops only: dist.send, dist.recv, dist.isend, dist.irecv.

What the check looks at (docs/exercises.md)
    values    every stage's .grad equal to the whole chain's in one process (float32
              within 1e-5 + 1e-5 x |value|), for world sizes 4, 3 and 2
    only p2p  a collective called inside your function is named, with its line
    traffic   bytes each rank sends: M activations forward (not the last stage) and M
              gradients back (not the first), one (rows x width) tensor each
    schedule  1F1B: a stage sends only to its neighbours, and stage r never has more
              than n - r microbatches' activations out whose gradient has not come back
              (GPipe, every forward then every backward, holds all M)
    waits     every isend/irecv waited on before you return
    deadline  every call returns within 5 s (a deadlock is named: who waits for whom)

Hints
    - Stage r runs min(n - r - 1, M) warm-up forwards, then one forward and one
      backward in turn while forwards are left, then the backwards left.
    - A forward: receive the activation from rank r - 1 (rank 0: take microbatches[k]),
      mark it x.requires_grad_() so its gradient exists, run the stage, send the output
      (detached) to rank r + 1 (the last stage: keep its loss instead).
    - A backward: receive the output's gradient from rank r + 1 and call
      output.backward(grad) (the last stage: loss.backward()), then send x.grad to
      rank r - 1.
    - dist.send waits for its receiver (gloo). isend every message, keep the requests
      (and their tensors) and wait on them before you return.
"""
import torch
import torch.distributed as dist


def pipeline_1f1b(stage: torch.nn.Module, microbatches: list[torch.Tensor], targets: list[torch.Tensor] | None) -> None:
    rank = dist.get_rank()
    world = dist.get_world_size()
    m = len(microbatches)
    warmup = min(world - rank - 1, m)
    raise NotImplementedError("run the warm-up forwards, then one forward one backward, then the backwards left")
