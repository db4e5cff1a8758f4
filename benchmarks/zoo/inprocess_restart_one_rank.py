# zoo: culprit=1 op=destroy_process_group|init_process_group line=33|34|9|20 kind=exception nproc=3 timeout=40
# zoo: about=a step-level "in-process restart": on a transient error rank 1 tears its process group down and joins a new one to retry the step, alone; the others are still in the old group's all_reduce
# zoo: source=https://github.com/vllm-project/vllm-ascend/pull/16145 (re-initializing the process group is a collective: only in a retry every rank joins)
import torch
import torch.distributed as dist


def setup():
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


rank, world = setup()
flaky = {"failed": False}


def train_step(step, grad):
    if rank == 1 and step == 2 and not flaky["failed"]:
        flaky["failed"] = True
        raise TimeoutError("feature store did not answer")   # rank 1's transient error
    dist.all_reduce(grad)
    return grad


grad = torch.ones(16)
step = 0
while step < 5:
    try:
        train_step(step, grad)
        step += 1
    except TimeoutError as e:
        print(f"rank {rank}: {e}; restarting the process group and retrying step {step}")
        dist.destroy_process_group()          # the bug: a restart only this rank takes part in
        rank, world = setup()
dist.destroy_process_group()
