"""Writes real CommDebugMode dumps (and the matching commlens-counts files) for the compare CLI
tests: `python make_dumps.py OUTDIR`. One process, fake process group, world size 4.

Files, for NAME in {mlp_grad, mlp_nograd, mlp_sp}:
  NAME.json         CommDebugMode.generate_json_dump(noise_level=1)
  NAME.counts.json  commlens-counts file (commlens.measure.counts_from_comm_mode)
"""
import json
import pathlib
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                               parallelize_module)
from torch.testing._internal.distributed.fake_pg import FakeStore

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
from commlens.measure import counts_from_comm_mode  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(8, 16)
        self.w2 = nn.Linear(16, 8)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.mlp = MLP()

    def forward(self, x):
        return x + self.mlp(self.norm(x))


def run(out, name, model, plan, x):
    torch.manual_seed(0)
    parallelize_module(model, MESH, plan)
    with CommDebugMode() as comm:
        model(x).sum().backward()
    comm.generate_json_dump(str(out / f"{name}.json"), noise_level=1)
    doc = {"format": "commlens-counts", "version": 1, "source": "measure", "world_size": 4,
           "modules": counts_from_comm_mode(comm, "both")}
    (out / f"{name}.counts.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    MESH = init_device_mesh("cpu", (4,))
    tp = {"w1": ColwiseParallel(), "w2": RowwiseParallel()}
    run(out, "mlp_grad", MLP(), tp, torch.randn(4, 8, requires_grad=True))
    run(out, "mlp_nograd", MLP(), tp, torch.randn(4, 8))
    sp = {"norm": SequenceParallel(),
          "mlp.w1": ColwiseParallel(),
          "mlp.w2": RowwiseParallel(output_layouts=Shard(1))}
    run(out, "mlp_sp", Block(), sp, torch.randn(2, 8, 8, requires_grad=True))
    dist.destroy_process_group()
