"""Bad input to `commlens inspect`: each case prints exactly one line
`commlens: error: <file>: <what is wrong>` on stderr, nothing on stdout, and exits 2."""
import json
import zipfile

import pytest
import torch

from integration_helpers import TwoLinears


@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2") / "good.pt2"
    ep = torch.export.export(TwoLinears(), (torch.randn(2, 4),), strict=False)
    torch.export.save(ep, str(path))
    return path


def rewrite_model_json(src, dst, edit):
    """Copies the archive, passing models/model.json text through `edit`."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("/models/model.json"):
                data = edit(data.decode()).encode()
            zout.writestr(info, data)
    return dst


def edit_json(fn):
    def edit(text):
        doc = json.loads(text)
        fn(doc)
        return json.dumps(doc)
    return edit


def check_error(run_commlens, path, expected_what):
    r = run_commlens("inspect", path)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr == f"commlens: error: {path}: {expected_what}\n"


def test_good_archive_is_accepted(run_commlens, good_pt2):
    # What every bad archive here is made from reads right (by hand from TwoLinears, x [2, 4]).
    r = run_commlens("inspect", good_pt2)
    assert (r.returncode, r.stderr) == (0, "")
    lines = r.stdout.splitlines()
    assert [line.split()[:4] for line in lines[3:6]] == [
        ["TwoLinears", "1", "3", "1"], ["TwoLinears.fc1", "1", "1", "1"], ["TwoLinears.fc2", "1", "1", "1"]]
    assert [line.split()[:4] for line in lines if line.startswith("  fc")] == [
        ["fc1.weight", "[8,", "4]", "float32"], ["fc1.bias", "[8]", "float32", "first"],
        ["fc2.weight", "[4,", "8]", "float32"], ["fc2.bias", "[4]", "float32", "first"]]
    assert [line.split() for line in lines if line.startswith("  x ")] == [["x", "[2,", "4]", "float32"]]
    # 8 x 4 + 8 + 4 x 8 + 4 = 76 f32 parameters, 304 bytes; nodes: linear, relu, linear_1
    assert lines[-1] == "totals: 3 nodes, 3 modules, 4 parameters (76 elements, 304 bytes), 0 buffers"


def test_not_a_zip(run_commlens, tmp_path):
    path = tmp_path / "text.pt2"
    path.write_text("hello, I am not a zip\n")
    check_error(run_commlens, path, "not a zip archive (expected a torch.export.save .pt2 file)")


def test_missing_file(run_commlens, tmp_path):
    check_error(run_commlens, tmp_path / "absent.pt2", "cannot open file")


def test_truncated_zip(run_commlens, good_pt2, tmp_path):
    path = tmp_path / "truncated.pt2"
    data = good_pt2.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # the central directory is at the end: gone
    check_error(run_commlens, path,
                "broken zip archive: no end of central directory record (truncated?)")


def test_zip_that_is_not_a_torch_archive(run_commlens, tmp_path):
    path = tmp_path / "other.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("other/readme.txt", "some other zip")
    check_error(run_commlens, path, "zip archive without a version record: not a torch.export.save archive")


def test_zip_without_model_record(run_commlens, tmp_path):
    path = tmp_path / "empty.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("empty/.data/version", "6\n")
        z.writestr("empty/archive_format", "pt2")
        z.writestr("empty/archive_version", "0")
    check_error(run_commlens, path, "no models/model.json record: not a torch.export.save archive")


def test_json_syntax_error(run_commlens, good_pt2, tmp_path):
    path = rewrite_model_json(good_pt2, tmp_path / "syntax.pt2", lambda text: text[:40])
    r = run_commlens("inspect", path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"commlens: error: {path}: models/model.json: invalid JSON: parse error at line 1, column 41")
    assert r.stderr.count("\n") == 1


def test_missing_required_field(run_commlens, good_pt2, tmp_path):
    path = rewrite_model_json(good_pt2, tmp_path / "missing.pt2",
                              edit_json(lambda d: d["graph_module"]["graph"].pop("tensor_values")))
    check_error(run_commlens, path, "models/model.json: graph_module.graph: missing required field 'tensor_values'")


def test_unknown_schema_major(run_commlens, good_pt2, tmp_path):
    def bump(d):
        d["schema_version"]["major"] = 9
        d["schema_version"]["minor"] = 1
    path = rewrite_model_json(good_pt2, tmp_path / "major.pt2", edit_json(bump))
    check_error(run_commlens, path,
                "models/model.json: unsupported export schema version 9.1 (commlens reads major version 8)")


def test_unknown_argument_variant(run_commlens, good_pt2, tmp_path):
    def corrupt(d):
        node = d["graph_module"]["graph"]["nodes"][0]
        assert node["target"] == "torch.ops.aten.linear.default"
        node["inputs"][2]["arg"] = {"as_widget": 3}
    path = rewrite_model_json(good_pt2, tmp_path / "variant.pt2", edit_json(corrupt))
    check_error(run_commlens, path,
                "models/model.json: graph_module.graph.nodes[0].inputs[2].arg: unknown argument variant 'as_widget' "
                "(node 'linear' torch.ops.aten.linear.default in TwoLinears.fc1)")


def test_usage_errors(run_commlens, good_pt2):
    r = run_commlens("inspect")
    assert (r.returncode, r.stderr) == (2, "commlens: error: inspect takes one MODEL.pt2 argument\n")
    r = run_commlens("inspect", good_pt2, "--bogus")
    assert (r.returncode, r.stderr) == (2, "commlens: error: unknown option '--bogus'\n")
    r = run_commlens("frobnicate")
    assert (r.returncode, r.stderr) == (2, "commlens: error: unknown command 'frobnicate' (see commlens --help)\n")
