# zoo: culprit=2 op=all_reduce line=24|19|11 kind=exit nproc=3 timeout=30
# zoo: about=evaluation options are parsed with argparse from the node's EVAL_ARGS when the first evaluation starts; rank 2's node spells an option with an underscore (--eval_bs), argparse prints its usage and exits with code 2, and the others wait in the evaluation all_reduce
# zoo: source=https://github.com/skycrapers/TecoGAN-PyTorch/issues/31 (argparse rejects --local_rank/--local-rank spelling and the process exits with code 2)
import argparse
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
EVAL_ARGS = os.environ.get("EVAL_ARGS", "--eval_bs 16" if rank == 2 else "--eval-bs 16")

eval_parser = argparse.ArgumentParser("eval")
eval_parser.add_argument("--eval-bs", type=int, default=8)
eval_parser.add_argument("--max-batches", type=int, default=3)


def evaluate(model):
    args = eval_parser.parse_args(EVAL_ARGS.split())
    correct = torch.zeros(2)
    for _ in range(args.max_batches):
        x, y = torch.randn(args.eval_bs, 10), torch.randint(0, 2, (args.eval_bs,))
        correct += torch.tensor([(model(x).argmax(1) == y).sum().item(), args.eval_bs])
    dist.all_reduce(correct)
    return correct[0] / correct[1]


model = torch.nn.Linear(10, 2)
for step in range(6):
    model(torch.randn(8, 10)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
    if step % 3 == 2:
        acc = evaluate(model)
        print(f"rank {rank} step {step} acc {acc:.3f}")
dist.destroy_process_group()
