"""Reads a run's argument dump (<output_prefix>/args_dump/): per task, its
scalars and, per tensor argument, the input as it was before the task ran
and the output after, as NumPy arrays in the argument's shape.

    from simpler_setup.tools.args_dump import load_args_dump
    for task in load_args_dump(prefix): task["args"][0]["before"] ...
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simpler.task_interface import DataType

__all__ = ["load_args_dump"]

_DTYPES = {"f32": DataType.FLOAT32, "f16": DataType.FLOAT16, "bf16": DataType.BFLOAT16, "i8": DataType.INT8,
           "i16": DataType.INT16, "i32": DataType.INT32, "i64": DataType.INT64, "u8": DataType.UINT8,
           "u16": DataType.UINT16, "u32": DataType.UINT32, "u64": DataType.UINT64, "f64": DataType.FLOAT64,
           "bool": DataType.BOOL}


def load_args_dump(prefix) -> list[dict]:
    d = Path(prefix) / "args_dump"
    manifest = json.loads((d / "manifest.json").read_text())
    blob = (d / manifest["blob"]).read_bytes()
    tasks = []
    for t in manifest["tasks"]:
        args = []
        for a in t["args"]:
            if a["kind"] == "scalar":
                args.append({"kind": "scalar", "value": a["value"]})
                continue
            dt = _DTYPES[a["dtype"]].to_numpy()
            entry = {"kind": "tensor", "access": a["access"], "shape": tuple(a["shape"])}
            for phase in ("before", "after"):
                loc = a.get(phase)
                entry[phase] = None if loc is None else np.frombuffer(
                    blob, dtype=dt, count=loc["bytes"] // dt.itemsize, offset=loc["offset"]).reshape(entry["shape"])
            args.append(entry)
        tasks.append({"id": t["id"], "func_id": t["func_id"], "kernel": t["kernel"], "block_num": t["block_num"],
                      "args": args})
    return tasks
