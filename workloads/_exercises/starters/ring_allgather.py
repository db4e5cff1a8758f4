"""Exercise ring_allgather: an all-gather around a ring.

Check it on the lab:   labctl exercise check ring_allgather THIS_FILE

The contract
    all_gather(tensor_list, tensor) is called by every rank at once, as torch's is.
    `tensor` is this rank's 1-D tensor (int64 or float32, any size); `tensor_list` holds
    world-size tensors of the same size and dtype, holding garbage. When your function
    returns, tensor_list[r] on every rank holds rank r's `tensor`; `tensor` is unchanged.
    Write into the tensors of the list (copy_, recv into them); replacing an element of
    the list does not reach the caller's tensors.
    Use point-to-point ops only: dist.send, dist.recv, dist.isend, dist.irecv.

What the check looks at (docs/exercises.md)
    values    equal to torch's all_gather, for world sizes 4, 3 and 2
    only p2p  a collective called inside your function is named, with its line
    traffic   bytes each rank sends: (n-1) x S for a tensor of S bytes (each rank passes
              on n-1 tensors, one per step)
    waits     every isend/irecv waited on before you return
    deadline  every call returns within 5 s
    time      yours against torch's all_gather (reported, not graded)

Hints
    - Step 0: send your own tensor to the right, receive the left neighbour's.
      Step k: send on what you received in step k-1.
    - dist.send returns only once the receiver has called recv (gloo): if every rank
      sends first, every rank waits. Use dist.isend, then recv, then wait().
"""
import torch
import torch.distributed as dist


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor) -> None:
    rank = dist.get_rank()
    world = dist.get_world_size()
    left, right = (rank - 1) % world, (rank + 1) % world
    raise NotImplementedError("write the ring all-gather here")
