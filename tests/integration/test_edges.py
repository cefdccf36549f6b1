"""Inputs at the edges (issue 30), one section each: what commlens does with them, against
CommDebugMode (commlens.measure or CommDebugMode itself) or by hand derivations written in the test."""
import json
import os
import zipfile

import pytest
import torch

from integration_helpers import TwoLinears, export_pt2, save_plan

AG = "c10d_functional.all_gather_into_tensor"
AR = "c10d_functional.all_reduce"


def error_of(r):
    """The one error line of a refused run (exit 2, nothing on stdout)."""
    assert (r.returncode, r.stdout, r.stderr.count("\n")) == (2, "", 1), (r.returncode, r.stdout, r.stderr)
    return r.stderr.removeprefix("commlens: error: ").rstrip("\n")


def counts_file(path, forward_bytes):
    doc = {"format": "commlens-counts", "version": 1, "phase": "forward", "modules": [
        {"fqn": "Global", "forward": {AG: 126}, "backward": {}, "forward_bytes": {AG: forward_bytes}}]}
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


