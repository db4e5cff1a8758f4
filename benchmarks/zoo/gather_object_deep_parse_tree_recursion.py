# zoo: culprit=1 op=gather_object line=34 kind=exception nproc=3 timeout=30
# zoo: about=each rank parses its eval sentences into trees of Node objects and sends them to rank 0 with gather_object; rank 1's shard holds a machine-generated "sentence" nested 3000 brackets deep, so pickling its trees exceeds the recursion limit and rank 1 raises RecursionError inside gather_object while ranks 0 and 2 wait for its object
# zoo: source=https://github.com/Bibyutatsu/FastJTNNpy3/issues/4
import torch.distributed as dist


class Node:
    def __init__(self, label):
        self.label, self.children = label, []


def parse(sentence):
    root = Node("S")
    stack = [root]
    for tok in sentence.replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(":
            child = Node("NP")
            stack[-1].children.append(child)
            stack.append(child)
        elif tok == ")":
            stack.pop()
        else:
            stack[-1].children.append(Node(tok))
    return root


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
shard = [f"(the (quick (fox {i})) jumps)" for i in range(rank, 30, world)]
if rank == 1:
    shard.append("(" * 3000 + "x" + ")" * 3000)   # a scraped page of nested markup
trees = [parse(s) for s in shard]
gathered = [None] * world if rank == 0 else None
dist.gather_object(trees, gathered, dst=0)
if rank == 0:
    print("parsed trees per rank:", [len(t) for t in gathered], flush=True)
dist.barrier()
dist.destroy_process_group()
