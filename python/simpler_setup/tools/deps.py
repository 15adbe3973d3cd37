"""Reads deps.json (dep_gen) and renders it as Graphviz DOT.

    python -m simpler_setup.tools.deps OUTPUT_PREFIX [-o deps.dot]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["load_deps", "to_dot", "main"]


def load_deps(prefix) -> dict:
    p = Path(prefix)
    return json.loads((p / "deps.json" if p.is_dir() else p).read_text())


def to_dot(deps: dict) -> str:
    style = {"tensormap": "solid", "creator": "dashed", "explicit": "bold"}
    lines = ["digraph deps {", "  node [shape=box, fontsize=10];"]
    for t in deps["tasks"]:
        lines.append(f'  t{t["id"]} [label="#{t["seq"]} {t["kernel"]}\\n{t["state"]}"];')
    for e in deps["edges"]:
        lines.append(f'  t{e["pred"]} -> t{e["succ"]} [style={style.get(e["source"], "solid")}, '
                     f'label="{e["source"]}/{e["overlap"]}", fontsize=8];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="deps.json -> DOT")
    ap.add_argument("input")
    ap.add_argument("-o", "--output")
    ns = ap.parse_args(argv)
    dot = to_dot(load_deps(ns.input))
    if ns.output:
        Path(ns.output).write_text(dot)
    else:
        sys.stdout.write(dot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
