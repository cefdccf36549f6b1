"""commlens' collective time estimates beside torch inductor's (torch/_inductor/comm_analysis.py,
estimate_nccl_collective_runtime_impl) for the same collective, message size and group, on an
H100 cluster (8 GPUs per node, NVLink 370 GB/s, InfiniBand NDR 50 GB/s per GPU).

    .venv/bin/python bench/comm_time.py [--cluster h100-ib-ndr] [--commlens build/commlens]

Both follow NCCL's tuning model (ring and tree x LL, LL128, Simple; tuning.cc constants). The
"why" column explains each difference:
  same         - identical model (inside one node)
  ib-corr      - inductor scales the network bandwidth by its H100 RoCE calibration (NIC efficiency
                 0.77-1.0 by node count, multi-rail gain for > 2 nodes); commlens keeps the NIC's
                 line rate (give measured nccl-tests tables to calibrate: docs/cluster-format.md)
  a2a-steps    - inductor models all_to_all as 2(n-1) ring steps; commlens uses the (n-1)/n bus
                 factor nccl-tests reports for alltoall, i.e. n-1 steps
Message sizes are NCCL's (all_gather: the gathered output), passed to both.
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPU_TYPES = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
SIZES = [1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 28, 1 << 30]
GROUPS = [(8, 1), (16, 2), (64, 8)]  # (ranks, nodes) at 8 GPUs per node
LINE = re.compile(r": ([0-9.]+) us \(([a-z0-9/]+);")


def inductor_estimator(gpu):
    """comm_analysis' estimate (us) with its GPU detection pinned to `gpu` (no GPU here)."""
    import torch._inductor.comm_analysis as ca

    ca.get_gpu_type = lambda: ca.NVIDIA_GPU_TYPE(GPU_TYPES[gpu])
    kinds = {"all_reduce": ca.NCCL_COLL.ALL_REDUCE, "all_gather": ca.NCCL_COLL.ALL_GATHER,
             "reduce_scatter": ca.NCCL_COLL.REDUCE_SCATTER, "all_to_all": ca.NCCL_COLL.ALL_TO_ALL}

    def estimate(kind, message_bytes, ranks):
        return 1000.0 * ca.estimate_nccl_collective_runtime_impl(message_bytes, ranks, kinds[kind])
    return estimate


def ours(commlens, cluster, kind, message_bytes, ranks, nodes):
    per_rank = message_bytes // ranks if kind == "all_gather" else message_bytes
    out = subprocess.run([commlens, "collective-time", "--cluster", cluster, "--collective", kind, "--bytes",
                          str(per_rank), "--ranks", str(ranks), "--nodes", str(nodes)],
                         capture_output=True, text=True, check=True).stdout
    m = LINE.search(out)
    return float(m.group(1)), m.group(2)


def why(kind, nodes, rel):
    if abs(rel) < 1e-4:  # commlens prints 3 decimals
        return "same"
    if kind == "all_to_all":
        return "a2a-steps" + ("+ib-corr" if nodes > 1 else "")
    return "ib-corr" if nodes > 1 else "UNEXPLAINED"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", default="h100-ib-ndr", help="a preset with 8 GPUs per node")
    parser.add_argument("--gpu", default="hopper", choices=sorted(GPU_TYPES), help="the preset's GPU generation")
    parser.add_argument("--commlens", default=str(pathlib.Path(os.environ.get("COMMLENS_BUILD", ROOT / "build"))
                                                  / "commlens"))
    ns = parser.parse_args(argv)
    estimate = inductor_estimator(ns.gpu)
    print(f"{'collective':<15} {'bytes':>11} {'ranks':>5} {'nodes':>5}  {'commlens us':>12} {'algorithm':<12} "
          f"{'inductor us':>12} {'ratio':>7}  why")
    unexplained = 0
    t_ours = t_theirs = 0.0
    for kind in COLLECTIVES:
        for ranks, nodes in GROUPS:
            for size in SIZES:
                t0 = time.perf_counter()
                mine, algo = ours(ns.commlens, ns.cluster, kind, size, ranks, nodes)
                t1 = time.perf_counter()
                theirs = estimate(kind, size, ranks)
                t2 = time.perf_counter()
                t_ours += t1 - t0
                t_theirs += t2 - t1
                rel = (mine - theirs) / theirs if theirs else 0.0
                w = why(kind, nodes, rel)
                unexplained += w == "UNEXPLAINED"
                print(f"{kind:<15} {size:>11} {ranks:>5} {nodes:>5}  {mine:>12.3f} {algo:<12} {theirs:>12.3f} "
                      f"{mine / theirs if theirs else float('nan'):>7.3f}  {w}")
    print(f"unexplained differences: {unexplained}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
