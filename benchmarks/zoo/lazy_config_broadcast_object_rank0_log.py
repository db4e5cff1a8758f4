# zoo: culprit=0 op=broadcast_object_list line=34|19 kind=hang nproc=3 timeout=30
# zoo: about=run_config() is lru_cached and broadcasts rank 0's config with broadcast_object_list on its first call; rank 0 first calls it in a startup log line only it runs, so its broadcast meets the others' all_gather_object of the host table and every rank hangs
# zoo: source=https://github.com/OP2/PyOP2/issues/696 (a per-process cache in front of a collective must be hit collectively)
import functools
import json
import logging
import socket
import torch
import torch.distributed as dist

log = logging.getLogger("train")

DEFAULT_CONFIG = {"lr": 3e-4, "warmup": 100, "layers": 4, "tags": ["baseline", "v2"]}


@functools.lru_cache(maxsize=None)
def run_config():
    obj = [dict(DEFAULT_CONFIG) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(obj, src=0)
    return json.dumps(obj[0], sort_keys=True)


def host_table():
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, (socket.gethostname(), torch.get_num_threads()))
    return hosts


def main():
    logging.basicConfig(level=logging.INFO)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        log.info("starting run with config %s", run_config())
    hosts = host_table()
    cfg = json.loads(run_config())
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    loss = model(torch.randn(4, 8)).sum()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    if rank == 0:
        log.info("hosts %s", hosts)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
