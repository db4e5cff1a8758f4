# zoo: culprit=1 op=all_reduce line=17|18 kind=exception nproc=3 timeout=30
# zoo: about=main is wrapped in torch.distributed.elastic's @record: rank 1 raises a KeyError in its step, the error file names it, the others wait in all_reduce
# zoo: source=https://github.com/mlc-ai/pith-train/pull/31 (@record so torchrun's failure summary carries the rank's traceback)
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batch = {"input": torch.ones(16)}
    grad = torch.ones(16)
    for step in range(4):
        if rank == 1 and step == 2:
            batch = {"inputs": batch["input"]}   # the bug: a renamed key on one data path
        dist.all_reduce(grad + batch["input"])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
