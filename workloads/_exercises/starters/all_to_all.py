"""Exercise all_to_all: every rank sends a different block to every rank.

Check it on the lab:   labctl exercise check all_to_all THIS_FILE

The contract
    all_to_all(output_list, input_list) is called by every rank at once, as torch's is.
    Both lists hold world-size 1-D tensors of one size and dtype (int64 or float32);
    the outputs hold garbage. When your function returns, output_list[j] on rank r holds
    rank j's input_list[r]; the inputs are unchanged.
    Use point-to-point ops only: dist.send, dist.recv, dist.isend, dist.irecv (and
    dist.batch_isend_irecv).

What the check looks at (docs/exercises.md)
    values    equal to torch's all_to_all, for world sizes 4, 3 and 2
    only p2p  a collective called inside your function is named, with its line
    traffic   bytes each rank sends: (n-1) x S for blocks of S bytes (your own block
              stays home: copy it)
    waits     every isend/irecv waited on before you return
    deadline  every call returns within 5 s
    time      yours against torch's all_to_all (reported, not graded)

Hints
    - In step k (1 <= k < n) send to rank + k and receive from rank - k: everybody has
      a partner in every step, and nobody waits for a rank that waits for someone else.
    - Posting every isend and irecv first and then waiting on all of them works too.
"""
import torch
import torch.distributed as dist


def all_to_all(output_list: list[torch.Tensor], input_list: list[torch.Tensor]) -> None:
    rank = dist.get_rank()
    world = dist.get_world_size()
    raise NotImplementedError("write the all-to-all here")
