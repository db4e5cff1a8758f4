# zoo: culprit=3 op=all_gather_object line=38|36 kind=exception nproc=4 timeout=30
# zoo: about=each rank scores its eval shard and all_gathers a result record, putting the caught exception object in it when the shard is malformed; rank 3's shard has a truncated record, so its record carries a ShardFormatError whose __init__ takes two arguments, and unpickling it (type(err)(*err.args)) raises TypeError on every rank inside all_gather_object
# zoo: source=https://github.com/python/cpython/issues/98873
import torch
import torch.distributed as dist


class ShardFormatError(Exception):
    def __init__(self, path, line_no):
        super().__init__(f"{path}: malformed record at line {line_no}")
        self.path, self.line_no = path, line_no


def read_shard(rank):
    records = [f"question {i}\tanswer {i}" for i in range(40)]
    if rank == 3:
        records[17] = "question 17"            # the copy was cut off mid-line
    return records


def score_shard(rank):
    correct = 0
    for line_no, rec in enumerate(read_shard(rank)):
        fields = rec.split("\t")
        if len(fields) != 2:
            raise ShardFormatError(f"eval/shard{rank}.tsv", line_no)
        correct += fields[1].endswith(str(line_no))
    return correct


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
try:
    record = {"rank": rank, "correct": score_shard(rank)}
except ShardFormatError as err:
    record = {"rank": rank, "error": err}     # let rank 0 report it instead of dying alone
records = [None] * world
dist.all_gather_object(records, record)
if rank == 0:
    print({r["rank"]: r.get("correct", r.get("error")) for r in records})
dist.barrier()
dist.destroy_process_group()
