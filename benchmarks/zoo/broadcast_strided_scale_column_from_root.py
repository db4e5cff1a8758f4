# zoo: culprit=0 op=broadcast line=28|25 kind=silent nproc=3 timeout=30
# zoo: about=rank 0 calibrates int8 quantization and keeps (scale, zero_point) per layer in an [L, 2] table, then broadcasts the scale column table[:, 0], a strided view, into the others' contiguous buffers; gloo sends the view's first L elements of storage, so ranks 1 and 2 silently receive interleaved scales and zero points and quantize with wrong scales
# zoo: source=https://github.com/pytorch/pytorch/issues/192920
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
LAYERS = 6
torch.manual_seed(0)
weights = [torch.randn(64, 64) * (i + 1) for i in range(LAYERS)]


def calibrate(ws):
    table = torch.empty(len(ws), 2)
    for i, w in enumerate(ws):
        lo, hi = w.min(), w.max()
        table[i, 0] = (hi - lo) / 255                 # scale
        table[i, 1] = torch.round(-lo / table[i, 0])  # zero point
    return table


if rank == 0:
    table = calibrate(weights)
    scales = table[:, 0]
else:
    scales = torch.empty(LAYERS)
dist.broadcast(scales, src=0)

err = sum(((w / s).round().clamp(-128, 127) * s - w).abs().mean() for w, s in zip(weights, scales))
print(f"rank {rank}: scales {[round(float(s), 3) for s in scales]} quantization error {float(err):.3f}", flush=True)
dist.barrier()
dist.destroy_process_group()
