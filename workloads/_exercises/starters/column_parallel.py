"""Exercise column_parallel: a column-parallel linear layer, the first half of Megatron's
tensor-parallel MLP (docs/patterns.md, tp): each rank holds some columns of W, computes
its columns of the output, and the ranks all-gather the output.

Check it on the lab:   labctl exercise check column_parallel THIS_FILE

The contract
    column_parallel_linear(x, weight, bias, out) is called by every rank at once.
    The whole layer is y = x @ W + b with x of shape (T, d_in) and W of shape
    (d_in, d_out). x is the same on every rank. W and b are split by columns as
    torch.tensor_split(W, n, dim=1) splits them: rank r holds `weight` =
    W[:, its columns] (d_in x its width) and `bias` = b[its columns]. When n does not
    divide d_out the blocks are uneven (the first d_out % n ranks hold one column more),
    and a rank may hold no column at all (d_out < n). `out` (T x d_out) holds garbage.
    When your function returns, `out` on every rank holds the whole y; x, weight and bias
    are unchanged. int64 and float32.
    Use point-to-point ops only for the gather: dist.send, dist.recv, dist.isend,
    dist.irecv (and dist.batch_isend_irecv).

What the check looks at (docs/exercises.md)
    values    equal to x @ W + b computed in one process, for world sizes 4, 3 and 2
              (int64 exactly, float32 within 1e-5 + 1e-5 x |value|)
    only p2p  a collective called inside your function is named, with its line
    traffic   bytes each rank sends: its own columns (T x its width) to each of the n-1
              others; blocks padded to the widest are allowed (that is what equal-sized
              messages need), anything more is not
    waits     every isend/irecv waited on before you return
    deadline  every call returns within 5 s (a deadlock is named: who waits for whom)

Hints
    - Every rank can work out every rank's width: d_out // n, plus one for the first
      d_out % n ranks (that is torch.tensor_split's rule). Their start columns follow.
    - out[:, a:b] is a strided view: send and recv need contiguous tensors. Receive into
      a buffer of shape (T, width), then copy it into out's columns.
    - Post every irecv and isend, then wait on all of them: nobody waits for a rank that
      waits for someone else. A rank with no column sends nothing (and nobody waits
      for its block).
"""
import torch
import torch.distributed as dist


def column_parallel_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    rank = dist.get_rank()
    world = dist.get_world_size()
    mine = x @ weight + bias            # this rank's columns of y: (T, its width)
    raise NotImplementedError("gather every rank's columns into out here")
