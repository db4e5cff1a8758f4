# zoo: culprit=0 op=all_reduce line=39|40|11 kind=killed nproc=3 timeout=30
# zoo: about=the script restores SIGPIPE's default action (a CLI idiom for piping into head); rank 0 streams metrics into an uploader subprocess that exits on the first record, so rank 0's next write to the pipe kills it with SIGPIPE (exit -13, no traceback) while the others wait in all_reduce
# zoo: source=https://github.com/libsdl-org/SDL/issues/10835 (SIGPIPE when writing to stdin of an already-finished process)
import json
import signal
import subprocess
import sys
import torch
import torch.distributed as dist

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # exit quietly when piped into head/less

UPLOADER = r"""
import json, sys
for line in sys.stdin:
    rec = json.loads(line)
    if "run_id" not in rec:
        sys.exit("uploader: first record has no run_id")
"""


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sink = None
    if rank == 0:
        sink = subprocess.Popen([sys.executable, "-c", UPLOADER], stdin=subprocess.PIPE)
    for step in range(40):
        loss = model(torch.randn(16, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if sink is not None:
            sink.stdin.write((json.dumps({"step": step, "loss": loss.item()}) + "\n").encode())
            sink.stdin.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
