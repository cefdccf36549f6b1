"""Inputs at the edges (issue 30), one section each: what commlens does with them, against
CommDebugMode (commlens.measure or CommDebugMode itself) or by hand derivations written in the test."""
import json
import os
import zipfile

import pytest
import torch

from integration_helpers import TwoLinears, compare_with_measure, export_pt2, save_plan

AG = "c10d_functional.all_gather_into_tensor"
AR = "c10d_functional.all_reduce"


def error_of(r):
    """The one error line of a refused run (exit 2, nothing on stdout)."""
    assert (r.returncode, r.stdout, r.stderr.count("\n")) == (2, "", 1), (r.returncode, r.stdout, r.stderr)
    return r.stderr.removeprefix("commlens: error: ").rstrip("\n")


def counts_file(path, forward_bytes, count=126):
    doc = {"format": "commlens-counts", "version": 1, "phase": "forward", "modules": [
        {"fqn": "Global", "forward": {AG: count}, "backward": {}, "forward_bytes": {AG: forward_bytes}}]}
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def two_linears_pt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2") / "good.pt2"
    torch.export.save(torch.export.export(TwoLinears(), (torch.randn(8, 4),), strict=False), str(path))
    return path


def two_linears():
    torch.manual_seed(0)
    return TwoLinears(), (torch.randn(8, 4),)  # the global input: 8 rows, 2 per rank


# ---------------------------------------------------------------------------------------------
# Only regular files are read


NOT_REGULAR = "is not a regular file (a FIFO, socket or device)"


def test_device_fifo_and_directory_are_refused(run_commlens, two_linears_pt2, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # a read would block until a writer came: the check comes before the open
    assert error_of(run_commlens("inspect", "/dev/zero")) == f"/dev/zero: {NOT_REGULAR}"
    assert error_of(run_commlens("inspect", fifo)) == f"{fifo}: {NOT_REGULAR}"
    assert error_of(run_commlens("inspect", tmp_path)) == f"{tmp_path}: is a directory"
    assert error_of(run_commlens("predict", two_linears_pt2, "--plan", "/dev/zero")) == f"/dev/zero: {NOT_REGULAR}"
    assert error_of(run_commlens("predict", two_linears_pt2, "--plan", fifo)) == f"{fifo}: {NOT_REGULAR}"
    counts = counts_file(tmp_path / "c.json", 8)
    assert error_of(run_commlens("compare", counts, fifo)) == f"{fifo}: {NOT_REGULAR}"
    assert error_of(run_commlens("compare", "/dev/zero", counts)) == f"/dev/zero: {NOT_REGULAR}"
    assert error_of(run_commlens("collective-time", "--cluster", fifo, "--collective", "all_reduce", "--bytes", "8",
                                 "--ranks", "2")) == f"--cluster: {fifo}: {NOT_REGULAR}"


def test_files_read_whole_have_a_size_bound(run_commlens, two_linears_pt2, tmp_path):
    # a plan, counts or cluster file is read whole into memory: past 1 GiB (ir/InputFile.h) it is
    # refused by its size before any read (a sparse file: no disk is used)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate((1 << 30) + 1)
    too_big = f"{big}: is 1073741825 bytes, more than the 1073741824 read"
    assert error_of(run_commlens("predict", two_linears_pt2, "--plan", big)) == too_big
    counts = counts_file(tmp_path / "c.json", 8)
    assert error_of(run_commlens("compare", counts, big)) == too_big
    assert error_of(run_commlens("collective-time", "--cluster", big, "--collective", "all_reduce", "--bytes", "8",
                                 "--ranks", "2")) == f"--cluster: {too_big}"


# ---------------------------------------------------------------------------------------------
# The archive's records


def rewrite(src, dst, replace=None, append=()):
    """A copy of the archive `src` with records (names under the root folder) replaced by
    `replace`'s bytes and extra (name, bytes) entries appended."""
    replace = replace or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        root = zin.namelist()[0].split("/", 1)[0]
        for info in zin.infolist():
            zout.writestr(info, replace.get(info.filename.split("/", 1)[1], zin.read(info)))
        for name, data in append:
            zout.writestr(f"{root}/{name}", data)
    return dst


def test_torch_writes_the_records_checked(two_linears_pt2):
    with zipfile.ZipFile(two_linears_pt2) as z:
        root = z.namelist()[0].split("/", 1)[0]
        assert (z.read(f"{root}/.data/version"), z.read(f"{root}/archive_format"),
                z.read(f"{root}/archive_version")) == (b"6\n", b"pt2", b"0")


@pytest.mark.parametrize("record,text,what", [
    (".data/version", b"six\n", ".data/version is 'six\\0A', not a version number"),
    (".data/version", b"", ".data/version is '', not a version number"),
    (".data/version", b"99999999999999999999999\n",
     ".data/version is '99999999999999999999999': torch 2.13 reads versions 1 to 10"),
    (".data/version", b"11\n", ".data/version is '11': torch 2.13 reads versions 1 to 10"),
    (".data/version", b"0\n", ".data/version is '0': torch 2.13 reads versions 1 to 10"),
    ("archive_version", b"1", "archive_version is '1', expected '0'"),
    ("archive_version", b"zero", "archive_version is 'zero', expected '0'"),
    ("archive_format", b"pt2\n", "archive_format is 'pt2\\0A', expected 'pt2'"),
])
def test_version_records_are_checked(run_commlens, two_linears_pt2, tmp_path, record, text, what):
    bad = rewrite(two_linears_pt2, tmp_path / "bad.pt2", {record: text})
    assert error_of(run_commlens("inspect", bad)) == f"{bad}: {what}"


def test_absent_archive_version_and_format_are_accepted(run_commlens, two_linears_pt2, tmp_path):
    # torch reads an archive without archive_version as version 0 (PT2ArchiveReader.archive_version)
    src = tmp_path / "no_records.pt2"
    with zipfile.ZipFile(two_linears_pt2) as zin, zipfile.ZipFile(src, "w") as zout:
        for info in zin.infolist():
            if not info.filename.endswith(("/archive_version", "/archive_format")):
                zout.writestr(info, zin.read(info))
    assert run_commlens("inspect", src).returncode == 0


def test_duplicate_zip_entries_are_refused(run_commlens, two_linears_pt2, tmp_path):
    with pytest.warns(UserWarning, match="Duplicate name"):
        bad = rewrite(two_linears_pt2, tmp_path / "dup.pt2", append=[("models/model.json", b"{broken")])
    root = zipfile.ZipFile(bad).namelist()[0].split("/", 1)[0]
    assert error_of(run_commlens("inspect", bad)) == f"{bad}: zip archive with two entries named '{root}/models/model.json'"


# ---------------------------------------------------------------------------------------------
# Integers of a program checked for range


def edit_model(src, dst, edit):
    with zipfile.ZipFile(src) as z:
        name = next(n for n in z.namelist() if n.endswith("/models/model.json"))
        doc = json.loads(z.read(name))
    edit(doc)
    return rewrite(src, dst, {"models/model.json": json.dumps(doc).encode()})


def test_schema_major_is_compared_before_narrowing(run_commlens, two_linears_pt2, tmp_path):
    def edit(doc):
        doc["schema_version"]["major"] = 2**32 + 8  # 8 once truncated to 32 bits
    bad = edit_model(two_linears_pt2, tmp_path / "bad.pt2", edit)
    minor = json.loads(zipfile.ZipFile(two_linears_pt2).read(
        next(n for n in zipfile.ZipFile(two_linears_pt2).namelist() if n.endswith("models/model.json"))))[
        "schema_version"]["minor"]
    assert error_of(run_commlens("inspect", bad)) == (
        f"{bad}: models/model.json: unsupported export schema version 4294967304.{minor} (commlens reads major "
        "version 8)")


def test_call_index_past_the_call_counter_is_refused(run_commlens, two_linears_pt2, tmp_path):
    def edit(doc):
        node = doc["graph_module"]["graph"]["nodes"][0]
        stack = node["metadata"]["nn_module_stack"]
        key = stack.split(",", 1)[0]
        node["metadata"]["nn_module_stack"] = stack.replace(key, key + "@4294967295", 1)
    bad = edit_model(two_linears_pt2, tmp_path / "bad.pt2", edit)
    what = error_of(run_commlens("inspect", bad))
    assert what.startswith(f"{bad}: models/model.json: graph_module.graph.nodes[0]: metadata.nn_module_stack: call "
                           "index 4294967295 in key '"), what
    assert what.endswith("' is out of range (at most 4294967294)"), what


# ---------------------------------------------------------------------------------------------
# Bytes are 64-bit: one cell of the 405B-shaped Llama under llama_tp(tp=8) is 8,751,939,584 bytes

BIG = 8_751_939_584  # > 2^32 = 4,294,967,296


def test_compare_bytes_past_2_to_the_32(run_commlens, tmp_path):
    predicted = counts_file(tmp_path / "p.json", BIG)
    measured = counts_file(tmp_path / "m.json", BIG)
    r = run_commlens("compare", predicted, measured, "--phase", "forward")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == ("summary: 1 cells, 0 differ; collectives predicted 126, measured 126 "
                                         "(forward); bytes compared on 1 cells")
    r = run_commlens("compare", predicted, measured, "--phase", "forward", "--json")
    cell = json.loads(r.stdout)["cells"][0]
    assert (cell["predicted_bytes"], cell["measured_bytes"], cell["match"]) == (BIG, BIG, True)
    r = run_commlens("compare", predicted, measured, "--phase", "forward", "--html")
    assert r.returncode == 0 and str(BIG) in r.stdout
    # one byte more on one side is a mismatch, told in full
    r = run_commlens("compare", predicted, counts_file(tmp_path / "m1.json", BIG + 1), "--phase", "forward")
    assert r.returncode == 1
    assert f"MISMATCH (bytes {BIG} predicted, {BIG + 1} measured)" in r.stdout


def test_counts_past_2_to_the_32(run_commlens, tmp_path):
    # counts are 64-bit too (bounded, like bytes, by 2^53 - 1): text, JSON and HTML carry them whole
    count = 2**32 + 5
    predicted, measured = counts_file(tmp_path / "p.json", BIG, count), counts_file(tmp_path / "m.json", BIG, count)
    r = run_commlens("compare", predicted, measured, "--phase", "forward")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == (f"summary: 1 cells, 0 differ; collectives predicted {count}, measured "
                                         f"{count} (forward); bytes compared on 1 cells")
    cell = json.loads(run_commlens("compare", predicted, measured, "--phase", "forward", "--json").stdout)["cells"][0]
    assert (cell["predicted"], cell["measured"]) == (count, count)
    assert str(count) in run_commlens("compare", predicted, measured, "--phase", "forward", "--html").stdout
    r = run_commlens("compare", predicted, counts_file(tmp_path / "m1.json", BIG, count + 1), "--phase", "forward")
    assert r.returncode == 1


def test_bytes_bound_is_2_to_the_53(run_commlens, tmp_path):
    ok = counts_file(tmp_path / "ok.json", 2**53 - 1)
    assert run_commlens("compare", ok, ok, "--phase", "forward").returncode == 0
    big = counts_file(tmp_path / "big.json", 2**53)
    assert error_of(run_commlens("compare", big, ok, "--phase", "forward")) == (
        f"{big}: modules[0].forward_bytes[\"{AG}\"]: bytes 9007199254740992 is out of range (at most 9007199254740991)")
    # each cell in range, their sum not: every sum over the file stays exact as a double
    doc = {"format": "commlens-counts", "version": 1, "phase": "forward", "modules": [
        {"fqn": "Global", "forward": {AG: 1, AR: 1}, "backward": {}, "forward_bytes": {AG: 2**52, AR: 2**52}}]}
    total = tmp_path / "total.json"
    total.write_text(json.dumps(doc))
    assert error_of(run_commlens("compare", total, ok, "--phase", "forward")) == (
        f"{total}: modules[0].forward_bytes[\"{AR}\"]: bytes 4503599627370496 take the file's total past "
        "9007199254740991")


# ---------------------------------------------------------------------------------------------
# A plan pattern that matches no module: torch warns and skips it


def plan_with_unmatched_pattern():
    from commlens import plan as planlib
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return planlib.Plan(mesh_shape=(2,), mesh_dim_names=("tp",), parallelize_plan={
        "fc1": ColwiseParallel(), "fc2": RowwiseParallel(), "fc3": ColwiseParallel()})


SKIPPED = "plan pattern 'fc3' matches no module of TwoLinears: skipped, as torch's parallelize_module skips it"


def test_unmatched_pattern_is_skipped_with_a_warning(run_commlens, tmp_path):
    plan_path = save_plan(plan_with_unmatched_pattern(), tmp_path)
    pt2 = export_pt2("test_edges:two_linears", tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"warning: {SKIPPED}"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o",
                     tmp_path / "predicted.json")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "predicted.json").read_text())["commlens"]["warnings"] == [SKIPPED]

    from commlens.measure import format_counts, measure

    with pytest.warns(UserWarning) as caught:
        doc = measure("test_edges:two_linears", plan_with_unmatched_pattern(), phase="both", return_document=True)
    assert [str(w.message) for w in caught if "fc3" in str(w.message)] == [f"plan: {SKIPPED}"]
    (tmp_path / "measured.json").write_text(format_counts(doc))
    r = run_commlens("compare", tmp_path / "predicted.json", tmp_path / "measured.json")
    assert r.returncode == 0, r.stdout
    # the same plan without the entry: the same collectives (fc1's and fc2's)
    skipped = plan_with_unmatched_pattern()
    del skipped.parallelize_plan["fc3"]
    assert measure("test_edges:two_linears", skipped, phase="both") == measure(
        "test_edges:two_linears", plan_with_unmatched_pattern(), phase="both")
    # check-plan still flags it
    assert error_of(run_commlens("check-plan", pt2, "--plan", plan_path)) == (
        f"{plan_path}: plan pattern 'fc3' matches no module of TwoLinears")
# ---------------------------------------------------------------------------------------------
# A plain tensor input under a Shard input layout: each rank passes its shard


WORLD = 4


def sharded_input_plan():
    from commlens import plan as planlib
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return planlib.Plan(mesh_shape=(WORLD,), mesh_dim_names=("tp",), parallelize_plan={
        "fc1": ColwiseParallel(input_layouts=Shard(0)), "fc2": RowwiseParallel()})


def test_sharded_plain_input_bytes_match_comm_debug_mode(run_commlens, tmp_path):
    """What a user runs: every rank passes its 2-row shard of the 8-row input. By hand: fc1's
    pre-hook all-gathers the 2x4 float32 shard (32 bytes) into the 8x4 global input; fc2 gives
    a Partial 8x4 output, all-reduced whole (128 bytes)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from commlens.measure import measure

    model, (x,) = two_linears()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    try:
        mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("tp",))
        parallelize_module(model, mesh, sharded_input_plan().parallelize_plan)
        with CommDebugMode() as comm:
            out = model(x.chunk(WORLD)[0])
        assert out.shape == (8, 4)  # the global batch is the exported one
        counts = {str(k): v for k, v in comm.get_comm_counts().items()}
    finally:
        dist.destroy_process_group()
    assert counts == {AG: 1, AR: 1}

    plan_path = save_plan(sharded_input_plan(), tmp_path)
    pt2 = export_pt2("test_edges:two_linears", tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "forward", "--format", "json")
    assert r.returncode == 0, r.stderr
    tree = json.loads(r.stdout)
    assert dict(tree["collectives_forward"]) == counts
    assert tree["collective_bytes_forward"] == {AG: 32, AR: 128}

    doc = measure("test_edges:two_linears", sharded_input_plan(), phase="forward", return_document=True)
    measured = {m["fqn"]: m for m in doc["modules"]}
    assert measured["Global"]["forward"] == counts
    assert measured["Global"]["forward_bytes"] == {AG: 32, AR: 128}


# ---------------------------------------------------------------------------------------------
# A program without nodes


class Inner(torch.nn.Module):
    def forward(self, x):
        return x


class Identity(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x)


def identity():
    return Identity(), (torch.randn(8, 4),)


@pytest.mark.parametrize("layout,collectives", [
    ("Replicate()", {}),
    # by hand: each rank's 4x4 float32 shard of the 8x4 input is all-gathered, 64 bytes
    ("Shard(0)", {AG: (1, 64)}),
])
def test_identity_program_is_predicted(run_commlens, tmp_path, layout, collectives):
    """The program has no node: the hooks of the module that runs no op go after the last one
    (none here), and the program returns what they give."""
    from commlens import plan as planlib
    from commlens.measure import measure
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import PrepareModuleInput

    pt2 = export_pt2("test_edges:identity", tmp_path)
    plan = planlib.Plan(mesh_shape=(2,), mesh_dim_names=("tp",), parallelize_plan={
        "inner": PrepareModuleInput(input_layouts=(planlib.placement_from_str(layout),),
                                    desired_input_layouts=(Replicate(),))})
    plan_path = save_plan(plan, tmp_path)
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "forward", "--format", "json")
    assert r.returncode == 0, r.stderr
    tree = json.loads(r.stdout)
    predicted = {op: (n, tree.get("collective_bytes_forward", {}).get(op)) for op, n in tree["collectives_forward"]}
    assert predicted == collectives
    doc = measure("test_edges:identity", plan, phase="forward", return_document=True)
    measured = doc["modules"][0]
    assert measured["fqn"] == "Global"
    assert {op: (n, measured["forward_bytes"][op]) for op, n in measured["forward"].items()} == collectives


# ---------------------------------------------------------------------------------------------
# A sum loss over outputs of several dtypes


class PoolWithIndices(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.max_pool2d(x, 3, 2, ceil_mode=True, return_indices=True)


def pool_with_indices():
    return PoolWithIndices(), (torch.randn(1, 2, 3, 6),)


def test_sum_loss_of_a_float_and_an_int_output_has_a_backward(run_commlens, tmp_path):
    """The model returns the pooled values and their int64 indices; the sum loss adds their sums
    as torch does: float32 + int64 is float32, so the backward runs. x [1, 2, 3, 6] is sharded on
    its width: max_pool2d all-gathers it (each rank sends its [1, 2, 3, 3] f32 shard, 72 bytes)
    and its backward all-gathers the saved input again. (The loss was typed int64, and predict
    saw no backward.)"""
    from commlens import plan as planlib
    from torch.distributed.tensor import Shard

    plan = planlib.Plan(mesh_shape=(2,), mesh_dim_names=("tp",), inputs_requires_grad=(0,),
                        input_placements={0: (Shard(3),)})
    pt2, plan_path = export_pt2("test_edges:pool_with_indices", tmp_path), save_plan(plan, tmp_path)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    tree = json.loads(predicted.read_text())
    assert (dict(tree["collectives_forward"]), dict(tree["collectives_backward"])) == ({AG: 1}, {AG: 1})
    summary = compare_with_measure(run_commlens, predicted, "test_edges:pool_with_indices", plan, tmp_path)
    assert summary["differ"] == 0 and summary["cells"] > 0, summary


class CrossEntropyInside(torch.nn.Module):
    def forward(self, x, t):
        return torch.nn.functional.cross_entropy(x, t)


def cross_entropy_inside():
    return CrossEntropyInside(), (torch.randn(2, 3), torch.tensor([0, 2]))


def test_loss_collective_outside_every_module_has_its_record(run_commlens, tmp_path):
    """A model computing its own cross-entropy on batch-sharded logits returns a Partial(avg)
    scalar; the plan's sum loss then all-reduces it (CommDebugMode traces the all_reduce under
    aten.sum.default, outside every module: Global alone). Its record (bytes, why) is in the JSON
    root's collectives_forward_detail, the table's Global section at noise level 1 and
    Prediction.collectives(), as every module's are."""
    import commlens
    from commlens import plan as planlib
    from commlens.export import export_model
    from torch.distributed.tensor import Replicate, Shard

    plan = planlib.Plan(mesh_shape=(2,), mesh_dim_names=("tp",), inputs_requires_grad=(0,),
                        input_placements={0: (Shard(0),), 1: (Replicate(),)})
    pt2, plan_path = export_pt2("test_edges:cross_entropy_inside", tmp_path), save_plan(plan, tmp_path)
    predicted = tmp_path / "predicted.json"
    r = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--format", "json", "-o", predicted)
    assert r.returncode == 0, r.stderr
    root = json.loads(predicted.read_text())
    [record] = root["collectives_forward_detail"]
    assert (record["module"], record["node"], record["op"], record["from"], record["to"], record["bytes_per_rank"]) == (
        "Global", "loss_sum", AR, "[P(avg)]", "[R]", 4)
    table = run_commlens("predict", pt2, "--plan", plan_path, "--phase", "both", "--noise-level", "1").stdout
    assert table.splitlines()[:4] == [
        "Global", "  FORWARD PASS", f"    *{AR}: 1",
        f"    **{AR} on mesh dim 0: [P(avg)] -> [R], 4 B/rank, aten::sum.default 'self' (aten::sum.default needs "
        "cross_entropy_loss as [R] (has [P(avg)]): aten::sum.default: candidate 1/1 [[R] | [R]] (only candidate, "
        "cost 12))"]
    model, args = cross_entropy_inside()
    p = commlens.predict(export_model(model, args), plan, phase="both")
    assert [(c["phase"], c["module"], c["op"]) for c in p.collectives()] == [
        ("forward", "Global", AR), ("backward", "CrossEntropyInside", AR)]
    summary = compare_with_measure(run_commlens, predicted, "test_edges:cross_entropy_inside", plan, tmp_path)
    assert summary["differ"] == 0 and summary["cells"] > 0, summary


class SparseTimesDense(torch.nn.Module):
    def forward(self, a, b):
        return torch.sparse.mm(a, b)


def test_sparse_tensor_in_memory_program_is_refused_by_name():
    """A program holding a sparse CSR tensor: neither commlens' JSON writer nor torch's can give it
    strides (torch's raises "Sparse CSR tensors do not have strides"); the API refuses it naming
    the tensor and its layout."""
    import commlens
    from commlens import plan as planlib
    from commlens.export import export_model

    a = torch.eye(4).to_sparse_csr()
    ep = export_model(SparseTimesDense(), (a, torch.randn(4, 2)))
    with pytest.raises(commlens.CommlensError) as raised:
        commlens.predict(ep, planlib.Plan(mesh_shape=(2,), mesh_dim_names=("tp",)))
    assert str(raised.value) == "program: tensor 'a' has layout torch.sparse_csr: commlens models strided tensors only"
