# zoo: culprit=2 op=all_reduce line=24|39|37 kind=exit nproc=4 timeout=30
# zoo: about=validation documents are packed into 512-token sequences and a guard added after an earlier hang exits the process when a rank ends up with no packed sequence; rank 2's validation shard holds only 400 tokens of documents, so at the first evaluation it prints a note and calls sys.exit(1) (no traceback) while the others wait for it in the validation all_reduce
# zoo: source=https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/1477
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
SEQ_LEN = 512
VAL_DOC_LENGTHS = [[300, 410, 220, 380], [512, 260, 290], [150, 250], [700, 340]][rank]


def pack(doc_lengths, seq_len):
    tokens = torch.cat([torch.arange(n) % 997 for n in doc_lengths])
    n_seq = tokens.numel() // seq_len
    return tokens[: n_seq * seq_len].view(n_seq, seq_len)


def validation_batches():
    packed = pack(VAL_DOC_LENGTHS, SEQ_LEN)
    if packed.shape[0] == 0:
        print(f"rank {rank}: no validation sequences after packing, stopping", flush=True)
        sys.exit(1)
    return packed.split(1)


model = torch.nn.Embedding(997, 16)
for step in range(1, 7):
    ids = torch.randint(0, 997, (4, SEQ_LEN))
    model.zero_grad()
    model(ids).pow(2).mean().backward()
    dist.all_reduce(model.weight.grad)
    if step % 3 == 0:
        with torch.no_grad():
            stats = torch.zeros(2)
            for seq in validation_batches():
                stats += torch.tensor([model(seq).pow(2).mean().item(), 1.0])
            dist.all_reduce(stats)
        if rank == 0:
            print(f"step {step}: val {stats[0].item() / stats[1].item():.4f}", flush=True)

dist.barrier()
dist.destroy_process_group()
