"""A stand-in for `commlens predict` to test bench/accuracy/run.py's bookkeeping:
`fake_predictor.py predict MODEL.pt2 --plan PLAN --phase P --format json -o OUT`.
It reads the measured counts the runner wrote (WORK/measured/CONFIG.counts.json, next to
WORK/predicted/CONFIG.json) and, by configuration name:
  *tp2*       writes them back as a CommDebugMode-style tree            -> exact
  *tp4-grad*  the same with Global's forward all_reduce count + 1      -> DIFF (1 cell)
  *tp4-both*  fails like an unsupported model                          -> predict error
  *tp8*       writes something that is not a counts file               -> compare error
"""
import json
import pathlib
import sys

args = sys.argv[1:]
assert args[0] == "predict", args
out = pathlib.Path(args[args.index("-o") + 1])
name = out.name[: -len(".json")]
measured = json.loads((out.parent.parent / "measured" / f"{name}.counts.json").read_text())


def tree(modules):
    # Flat modules in tree order -> nested CommDebugMode dump (parents by dotted prefix, Global root).
    nodes = {}
    root = None
    for m in modules:
        node = {"fqn": m["fqn"], "module_type": "", "parameters": [], "children": [],
                "collectives_forward": [[k, v] for k, v in m["forward"].items()],
                "collectives_backward": [[k, v] for k, v in m["backward"].items()],
                "predictor_note": "extra keys are ignored"}
        nodes[m["fqn"]] = node
        if m["fqn"] == "Global":
            root = node
            continue
        parent = m["fqn"].rpartition(".")[0]
        (nodes.get(parent) or root)["children"].append(node)
    return root


if "tp2" in name:
    out.write_text(json.dumps(tree(measured["modules"])))
elif "tp4-grad" in name:
    measured["modules"][0]["forward"]["c10d_functional.all_reduce"] += 1
    out.write_text(json.dumps(tree(measured["modules"])))
elif "tp4-both" in name:
    print(f"commlens: error: {args[1]}: unsupported operator aten.frobnicate.default", file=sys.stderr)
    sys.exit(2)
else:
    out.write_text('{"hello": 1}')
