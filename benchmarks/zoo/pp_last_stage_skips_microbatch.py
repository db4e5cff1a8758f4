# zoo: culprit=3 op=step|irecv|recv|isend|send|batch_isend_irecv line=21|26 kind=hang nproc=4 timeout=60
# zoo: about=a GPipe pipeline of 4 stages: the last stage cuts its targets into 3 microbatches where the others run 4, so it never takes the 4th activation nor sends its gradient back, and stage 2 waits for it
# zoo: source=https://github.com/pytorch/torchtitan/issues/775 https://github.com/deepspeedai/DeepSpeed/issues/5568
import torch
import torch.distributed as dist
import torch.nn.functional as F

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

torch.manual_seed(0)
layers = [torch.nn.Linear(16, 16) for _ in range(world)]
stage = PipelineStage(layers[rank], rank, world, torch.device("cpu"))
x, y = torch.randn(8, 16), torch.randn(8, 16)
microbatches = 4
if rank == world - 1:
    y = y[:6]                             # the last stage's target loader drops the ragged end
    microbatches = len(y) // 2            # the bug: its count from its own batch: 3
schedule = ScheduleGPipe(stage, microbatches, loss_fn=F.mse_loss)
if rank == 0:
    schedule.step(x)
elif rank == world - 1:
    schedule.step(target=y)
else:
    schedule.step()
dist.barrier()
dist.destroy_process_group()
