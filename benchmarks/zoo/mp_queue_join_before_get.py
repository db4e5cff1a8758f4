# zoo: culprit=2 op=all_reduce line=18|29|27 kind=hang nproc=3 timeout=40
# zoo: about=each rank builds its shard's token statistics in a child process that puts the result on a multiprocessing.Queue, and the parent joins the child before reading the queue; rank 2's shard has a long vocabulary tail, its result is larger than the pipe buffer, so the child cannot exit until someone reads and rank 2 waits in join() for ever while the others wait in the all_reduce
# zoo: source=https://github.com/vllm-project/vllm/pull/22371
import collections
import multiprocessing as mp
import torch
import torch.distributed as dist


def count_tokens(shard, q):
    q.put(dict(collections.Counter(shard)))


def shard_stats(shard):
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=count_tokens, args=(shard, q))
    p.start()
    p.join()
    return q.get()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    vocab = 500 if rank != 2 else 40_000
    shard = [f"tok{(i * 7919) % vocab}" for i in range(60_000)]
    stats = shard_stats(shard)
    sizes = torch.tensor([float(len(stats)), float(sum(stats.values()))])
    dist.all_reduce(sizes)
    print(f"rank {rank}: global vocab rows {sizes.tolist()}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
