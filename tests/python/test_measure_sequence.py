"""Several fake-backend measurements in one process (as the accuracy runner's workers do) must
not leak DTensor state: its sharding cache is keyed by the mesh's value, so a tp sub-mesh of
ranks [0, 1] from a (4, 2) mesh would otherwise answer for the equal sub-mesh of a later
(2, 2, 2) mesh whose process groups are new ("Could not resolve the process group")."""
from commlens.measure import measure


def test_equal_sub_meshes_in_consecutive_measurements():
    first = measure("examples.llama:llama", "examples.plans:llama_fsdp_tp(dp=4, tp=2)", phase="forward")
    second = measure("examples.llama:llama", "examples.plans:llama_hsdp_tp(replicate=2, shard=2, tp=2)",
                     phase="forward")
    # Forward: one FSDP all-gather per unit (2 blocks and the root), each in its pre-forward.
    assert first["Global"]["forward"]["c10d._allgather_base_"] == 3
    assert second["Global"]["forward"]["c10d._allgather_base_"] == 3
