"""Exercise average_gradients: the gradient averaging of the seeds' synchronous SGD
(PyTorch's "Writing Distributed Applications"), checked against DDP.

Check it on the lab:   labctl exercise check average_gradients THIS_FILE

The contract
    average_gradients(model) is called by every rank at once, after loss.backward() on
    this rank's own batch. Every rank's model has the same parameters. When your function
    returns, every parameter's .grad on every rank holds the mean over the ranks of that
    gradient: what DistributedDataParallel gives for the same step. The parameters
    themselves are unchanged.
    Collectives are allowed here (that is the tutorial's way); your own all-reduce from
    the other exercises works too.

What the check looks at (docs/exercises.md)
    values    every .grad equal to DDP's (float32 within 1e-5 + 1e-5 x |value|), for
              world sizes 4, 3 and 2, small models of several widths
    traffic   bytes handed to collectives, against the gradients' bytes: each gradient
              all-reduced once
    waits     every async op waited on before you return
    deadline  every call returns within 5 s
    time      yours against an all_reduce of each gradient (reported, not graded)

Hints
    - Sum with dist.all_reduce(param.grad, op=dist.ReduceOp.SUM), then divide by the
      world size. gloo has no ReduceOp.AVG.
    - Average the gradients (param.grad), not the weights (param.data).
"""
import torch
import torch.distributed as dist


def average_gradients(model: torch.nn.Module) -> None:
    world = float(dist.get_world_size())
    raise NotImplementedError("average every parameter's gradient here")
