# zoo: culprit=2 op=all_reduce line=24|35 kind=mismatch nproc=3 timeout=30
# zoo: about=each rank loads the tokenizer from its node-local cache; rank 2's stale copy has no pad token, so it adds one and resizes the embedding by a row: its embedding gradient is one row longer, and gloo aborts a rank in the gradient all_reduce
# zoo: source=https://github.com/EchoseChen/SPA-VL-RLHF/issues/2
import json
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

cache = Path(tempfile.mkdtemp(prefix=f"tok-cache-{rank}-"))
config = {"vocab_size": 500, "bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>"}
if rank == 2:
    config.pop("pad_token")                       # a copy cached before the pad token was set
(cache / "tokenizer_config.json").write_text(json.dumps(config))

tok = json.loads((cache / "tokenizer_config.json").read_text())
vocab = tok["vocab_size"]
if tok.get("pad_token") is None:
    tok["pad_token"] = "[PAD]"
    vocab += 1                                    # model.resize_token_embeddings(len(tokenizer))

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 32), torch.nn.Linear(32, 2))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    ids = torch.randint(0, 500, (8, 24))
    logits = model(ids).mean(dim=1)
    loss = torch.nn.functional.cross_entropy(logits, torch.randint(0, 2, (8,)))
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
