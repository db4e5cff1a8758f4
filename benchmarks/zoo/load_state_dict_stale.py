# zoo: culprit=1 op=all_reduce line=15|13|17 kind=exception nproc=3 timeout=30
# zoo: about=rank 1 resumes from an older checkpoint layout (a renamed key); load_state_dict raises there and the others wait in the first all_reduce
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/6430
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
state = {k: v.clone() for k, v in model.state_dict().items()}
if rank == 1:
    state["2.kernel"] = state.pop("2.weight")
dist.barrier()
model.load_state_dict(state)
for p in model.parameters():
    dist.all_reduce(p.data)
dist.destroy_process_group()
