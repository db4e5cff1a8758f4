# zoo: culprit=2 op=all_reduce line=19|23|24 kind=exception nproc=3 timeout=30
# zoo: about=rank 2's DataLoader worker hits a missing file on its third item: the exception surfaces in rank 2's next(), the others wait in all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/42107
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


from torch.utils.data import DataLoader, Dataset

class Files(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if rank == 2 and i == 2:
            raise FileNotFoundError(f"/data/coco/train2017/{i:012d}.jpg")
        return torch.ones(4)

grad = torch.ones(16)
for batch in DataLoader(Files(), batch_size=1, num_workers=1):
    dist.all_reduce(grad)
dist.destroy_process_group()
