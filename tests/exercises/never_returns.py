"""Bad input: a function that never returns on rank 2. Tests only."""
import time

import torch.distributed as dist


def allreduce(send, recv):
    recv.copy_(send)
    if dist.get_rank() == 2:
        time.sleep(3600)
