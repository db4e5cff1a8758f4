# zoo: culprit=2 op=all_gather_object line=39|30 kind=hang nproc=3 timeout=40
# zoo: about=each rank resolves its tokenizer config from the node-local cache and falls back to the model registry over HTTP with urllib.request.urlopen and no timeout; rank 2's cache is empty and its node's registry proxy accepts connections but never answers, so rank 2 blocks in the socket read while the others wait in all_gather_object
# zoo: source=https://github.com/torchgeo/torchgeo/issues/4067 (download_url calls urlopen without a timeout and hangs forever when the server stops sending)
import json
import os
import socket
import tempfile
import urllib.request
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
cache_dir = os.path.join(tempfile.gettempdir(), f"zoo_tok_cache_node{rank}")
os.makedirs(cache_dir, exist_ok=True)
if rank != 2:  # the nodes that ran this model before
    with open(os.path.join(cache_dir, "tokenizer.json"), "w") as f:
        json.dump({"vocab_size": 32000, "pad_id": 0}, f)
# the node's registry proxy: it accepts connections (the kernel's backlog) and has stopped answering
proxy = socket.socket()
proxy.bind(("127.0.0.1", 0))
proxy.listen(16)
REGISTRY = f"http://127.0.0.1:{proxy.getsockname()[1]}"


def tokenizer_config(name):
    path = os.path.join(cache_dir, "tokenizer.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    with urllib.request.urlopen(f"{REGISTRY}/models/{name}/tokenizer.json") as r:
        cfg = json.load(r)
    with open(path, "w") as f:
        json.dump(cfg, f)
    return cfg


cfg = tokenizer_config("tiny-lm")
everyone = [None] * world
dist.all_gather_object(everyone, cfg["vocab_size"])
assert len(set(everyone)) == 1, everyone
print(f"rank {rank} vocab {cfg['vocab_size']}")
dist.destroy_process_group()
