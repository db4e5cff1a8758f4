# zoo: culprit=1 op=all_reduce line=24|17|36|35 kind=hang nproc=3 timeout=30
# zoo: about=metrics are pushed by an asyncio uploader whose upload() holds its asyncio.Lock and, when the cached token has expired, awaits refresh_token(), which takes the same non-reentrant lock; only rank 1's node has an expired token cached, so its event loop waits on itself for ever inside asyncio.run while the others wait in the next all_reduce
# zoo: source=https://github.com/flet-dev/flet/issues/3150
import asyncio
import time

import torch
import torch.distributed as dist


class MetricsUploader:
    def __init__(self, token_expires_at):
        self.lock = asyncio.Lock()
        self.token_expires_at = token_expires_at

    async def refresh_token(self):
        async with self.lock:
            await asyncio.sleep(0.01)          # POST /oauth/token
            self.token_expires_at = time.time() + 3600

    async def upload(self, step, metrics):
        async with self.lock:
            if time.time() > self.token_expires_at:
                await self.refresh_token()
            await asyncio.sleep(0.01)          # PUT /runs/42/metrics
            return len(metrics)


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
cached_token_age_s = [120, 7200, 300][rank]     # age of the token in each node's credential cache
uploader = MetricsUploader(token_expires_at=time.time() + 3600 - cached_token_age_s)
for step in range(4):
    loss = torch.tensor([1.0 / (step + 1)])
    dist.all_reduce(loss)
    asyncio.run(uploader.upload(step, {"loss": loss.item() / world}))
dist.destroy_process_group()
