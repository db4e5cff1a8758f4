# zoo: culprit=0 op=all_reduce line=23|43 kind=hang nproc=3 timeout=30
# zoo: about=rank 0 sends its step metrics through a rate limiter that computes the wait in milliseconds and passes it to time.sleep, which takes seconds: at the second step rank 0 sleeps about 500 s, the others wait in the gradient all_reduce
# zoo: source=https://github.com/gnif/LookingGlass/pull/395 (sleep called with the wrong time unit)
import json
import time
import torch
import torch.distributed as dist


class RateLimitedSink:
    """The tracking API allows one request per MIN_INTERVAL_MS."""

    MIN_INTERVAL_MS = 500

    def __init__(self):
        self.last_ms = 0.0
        self.sent = []

    def send(self, record):
        now_ms = time.monotonic() * 1000
        wait_ms = self.last_ms + self.MIN_INTERVAL_MS - now_ms
        if wait_ms > 0:
            time.sleep(wait_ms)
        self.last_ms = time.monotonic() * 1000
        self.sent.append(json.dumps(record))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sink = RateLimitedSink() if rank == 0 else None
    for step in range(20):
        loss = model(torch.randn(16, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if sink is not None:
            sink.send({"step": step, "loss": round(loss.item(), 5)})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
