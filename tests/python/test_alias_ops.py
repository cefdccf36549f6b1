"""aten/AliasOps.def against the installed torch: each alias op is CompositeImplicitAutograd (it
runs another op, so DTensor and autograd never see it) and takes the same arguments as the op the
decomposition emits in its place, so the node's arguments carry over unchanged; and the alias's
result equals the target's on a sample."""
import pathlib
import re

import pytest
import torch

DEF = pathlib.Path(__file__).resolve().parents[2] / "aten" / "AliasOps.def"
ALIASES = re.findall(r'^ALIAS\("([^"]+)", "([^"]+)"\)$', DEF.read_text(), flags=re.M)


def overload(qualified):
    """torch.ops.aten.<name>.<overload> of "aten::name.overload"."""
    name, _, ov = qualified.removeprefix("aten::").partition(".")
    return getattr(getattr(torch.ops.aten, name), ov)


def test_the_table_is_read():
    assert len(ALIASES) >= 30 and ("aten::divide.Tensor", "aten::div.Tensor") in ALIASES


@pytest.mark.parametrize("alias,target", ALIASES, ids=[a for a, _ in ALIASES])
def test_alias_runs_its_target_with_the_same_arguments(alias, target):
    a, t = overload(alias), overload(target)
    name = alias.removeprefix("aten::").removesuffix(".default")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CompositeImplicitAutograd")
    assert [x.name for x in a._schema.arguments] == [x.name for x in t._schema.arguments]
    assert [x.kwarg_only for x in a._schema.arguments] == [x.kwarg_only for x in t._schema.arguments]
    torch.manual_seed(0)
    x = torch.rand(3, 4) * 0.8 + 0.1  # inside every function's domain here (acosh's: shifted below)
    values = {"self": x + 1 if "acosh" in target else x, "n": 1, "min": 0.2, "max": 0.7, "decimals": 1, "eps": 1e-6, "alpha": 2}
    kwargs = {}
    for s in a._schema.arguments:
        if s.name == "other":
            kwargs["other"] = torch.rand(3, 4) + 0.5 if str(s.type) == "Tensor" else 1.5
        else:
            kwargs[s.name] = values[s.name]
    torch.testing.assert_close(a(**kwargs), t(**kwargs), equal_nan=True)
