# zoo: culprit=0 op=all_reduce line=22|26|28 kind=hang nproc=3 timeout=30
# zoo: about=each rank stages its shard with a shell step run through subprocess.run(capture_output=True); for shards on the network mount the step also starts a page-cache warmer in the background that lives as long as the trainer, and that warmer inherits the captured stdout, so rank 0 (the only rank whose shard is on NFS) waits in run() for an end of file that never comes while the others wait in all_reduce
# zoo: source=https://github.com/gptme/gptme/issues/3756
import os
import subprocess

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
SHARD = ["/mnt/nfs/corpus/shard-000", "/scratch/corpus/shard-001", "/scratch/corpus/shard-002"][rank]
WARMER = 'while kill -0 "$TRAINER_PID" 2>/dev/null; do sleep 1; done &'


def stage_shard(path):
    script = 'echo "staging $SHARD"; '
    if path.startswith("/mnt/nfs"):             # keep network-mounted shards in the page cache
        script += WARMER + " "
    script += 'echo "staged"'
    env = dict(os.environ, SHARD=path, TRAINER_PID=str(os.getpid()))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=True)
    return done.stdout.splitlines()


log = stage_shard(SHARD)
n_lines = torch.tensor([len(log)])
dist.all_reduce(n_lines)
dist.destroy_process_group()
