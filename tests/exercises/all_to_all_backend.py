"""Cheat: gloo's own all-to-all, called on the backend object below torch's dispatcher, so the
trace sees no op at all. Tests only: the grade must fail it (right values, nothing sent)."""
import torch
import torch.distributed as dist


def all_to_all(output_list, input_list):
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    out = torch.empty(len(output_list) * output_list[0].numel(), dtype=output_list[0].dtype)
    backend.alltoall_base(out, torch.cat(input_list), [], [], dist.AllToAllOptions()).wait()
    for block, got in zip(output_list, out.chunk(len(output_list))):
        block.copy_(got)
