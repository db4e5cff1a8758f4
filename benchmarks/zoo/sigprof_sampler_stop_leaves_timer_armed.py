# zoo: culprit=1 op=all_reduce line=27|44|41 kind=killed nproc=4 timeout=30
# zoo: about=rank 1 is this run's profiling rank: a small sampling profiler arms ITIMER_PROF with a SIGPROF handler for two steps, and its stop() puts SIGPROF back to its default action without disarming the timer; the next tick of CPU time terminates rank 1 ("Profiling timer expired", no traceback) and the others lose it in the gradient all_reduce
# zoo: source=https://github.com/grafana/pyroscope-rs/issues/399
import collections
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
PROFILE_RANK, PROFILE_STEPS = 1, (2, 3)


class StackSampler:
    def __init__(self, interval=0.002):
        self.interval, self.counts = interval, collections.Counter()

    def _on_sample(self, signum, frame):
        self.counts[(frame.f_code.co_filename, frame.f_lineno)] += 1

    def start(self):
        signal.signal(signal.SIGPROF, self._on_sample)
        signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)

    def stop(self):
        signal.signal(signal.SIGPROF, signal.SIG_DFL)
        return self.counts.most_common(3)


sampler = StackSampler()
torch.manual_seed(0)
w = torch.randn(256, 256) / 16
for step in range(8):
    if rank == PROFILE_RANK and step == PROFILE_STEPS[0]:
        sampler.start()
    x = torch.randn(512, 256)
    for _ in range(20):
        x = torch.tanh(x @ w)
    grad = x.mean(0)
    dist.all_reduce(grad)
    w -= 0.01 * grad / world
    if rank == PROFILE_RANK and step == PROFILE_STEPS[-1]:
        print("hot lines:", sampler.stop(), flush=True)
dist.destroy_process_group()
