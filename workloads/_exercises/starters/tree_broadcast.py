"""Exercise tree_broadcast: a binomial-tree broadcast from any rank.

Check it on the lab:   labctl exercise check tree_broadcast THIS_FILE

The contract
    broadcast(tensor, src) is called by every rank at once with the same `src`. On rank
    `src`, `tensor` holds the data; on the others it has the same size and dtype and
    holds garbage. When your function returns, `tensor` on every rank holds src's data.
    Use point-to-point ops only: dist.send, dist.recv, dist.isend, dist.irecv.

What the check looks at (docs/exercises.md)
    values    equal to torch's broadcast, for world sizes 4, 3 and 2 and every src
    only p2p  a collective called inside your function is named, with its line
    traffic   bytes each rank sends: in a binomial tree no rank sends more than
              ceil(log2 n) times (src sending to every rank itself sends n-1 times)
    waits     every isend/irecv waited on before you return
    deadline  every call returns within 5 s
    time      yours against torch's broadcast at 4 MiB (reported, not graded)

Hints
    - Renumber the ranks so that src is 0: me = (rank - src) % world.
    - In round k (k = 0, 1, ...) every rank that has the data (me < 2**k) sends it to
      me + 2**k, if that rank exists. So a rank with me > 0 receives once, in the round
      k where 2**k <= me < 2**(k+1), from me - 2**k, and sends in every round after.
    - Map a renumbered rank back with (me + src) % world before you send or receive.
"""
import torch
import torch.distributed as dist


def broadcast(tensor: torch.Tensor, src: int) -> None:
    rank = dist.get_rank()
    world = dist.get_world_size()
    me = (rank - src) % world
    raise NotImplementedError("write the binomial-tree broadcast here")
