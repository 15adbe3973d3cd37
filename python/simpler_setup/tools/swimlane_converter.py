"""Converts a run's swimlane records (<output_prefix>/l2_perf_records.json)
into Chrome Trace Event JSON, which Perfetto (ui.perfetto.dev) and
chrome://tracing open.

Lanes: one per core (the task blocks it ran, and at level 3 its idle spans)
and, at level 4, the orchestrator (one slice per submit). Dependencies are
flow arrows from the end of a producer to the start of its consumer.

    python -m simpler_setup.tools.swimlane_converter OUTPUT_PREFIX [-o trace.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["convert", "main"]

_ORCH_TID = 100000


def _load(path) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "l2_perf_records.json"
    with open(p) as f:
        return json.load(f)


def convert(records, func_names: dict | None = None) -> dict:
    """Trace Event JSON (as a dict) from a records dict or a path."""
    rec = records if isinstance(records, dict) else _load(records)
    names = {int(k): v for k, v in (func_names or {}).items()}
    us = lambda ns: ns / 1000.0  # noqa: E731
    events = []
    pid = 0
    events.append({"ph": "M", "name": "process_name", "pid": pid,
                   "args": {"name": f"simpler {rec.get('platform', '')} ({rec.get('callable', '')})"}})
    for c in range(int(rec.get("cores", 0))):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": c, "args": {"name": f"core {c}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": c, "args": {"sort_index": c}})
    tasks = {t["id"]: t for t in rec.get("tasks", [])}

    def label(task_id):
        t = tasks.get(task_id, {})
        fid = t.get("func_id", -1)
        return names.get(fid) or t.get("kernel") or f"func {fid}"

    first_block = {}
    for b in rec.get("blocks", []):
        args = {"task": b["task"], "block": b["block"]}
        t = tasks.get(b["task"], {})
        for k in ("func_id", "state", "t_ready", "t_finish"):
            if k in t:
                args[k] = t[k]
        if "t_dispatch" in b:
            args["t_dispatch"] = b["t_dispatch"]
        events.append({"ph": "X", "name": label(b["task"]), "cat": "task", "pid": pid, "tid": b["core"],
                       "ts": us(b["t_start"]), "dur": max(us(b["t_end"] - b["t_start"]), 0.001), "args": args})
        if b["block"] == 0 or b["task"] not in first_block:
            first_block.setdefault(b["task"], b)
    # Tasks that never ran (cancelled, alloc-only) are instants.
    for t in tasks.values():
        if t["id"] not in first_block and t.get("state") != "done":
            events.append({"ph": "i", "s": "t", "name": f"{label(t['id'])} ({t.get('state')})", "pid": pid,
                           "tid": max(t.get("core", 0), 0), "ts": us(t.get("t_finish", t.get("t_start", 0)))})
    # Dependency arrows, producer end -> consumer start.
    flow_id = 0
    last_block = {}
    for b in rec.get("blocks", []):
        cur = last_block.get(b["task"])
        if cur is None or b["t_end"] > cur["t_end"]:
            last_block[b["task"]] = b
    for pred, succ in rec.get("edges", []):
        a, z = last_block.get(pred), first_block.get(succ)
        if a is None or z is None:
            continue
        flow_id += 1
        events.append({"ph": "s", "id": flow_id, "name": "dep", "cat": "dep", "pid": pid, "tid": a["core"],
                       "ts": us(a["t_end"]) - 0.0005})
        events.append({"ph": "f", "bp": "e", "id": flow_id, "name": "dep", "cat": "dep", "pid": pid,
                       "tid": z["core"], "ts": us(z["t_start"]) + 0.0005})
    for s in rec.get("sched", []):
        events.append({"ph": "X", "name": s["phase"], "cat": "sched", "pid": pid, "tid": s["core"],
                       "ts": us(s["t0"]), "dur": max(us(s["t1"] - s["t0"]), 0.001)})
    if rec.get("orchestrator"):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": _ORCH_TID,
                       "args": {"name": "orchestrator"}})
        for o in rec["orchestrator"]:
            events.append({"ph": "X", "name": f"submit {label(o['task'])}", "cat": "orchestrator", "pid": pid,
                           "tid": _ORCH_TID, "ts": us(o["t_begin"]), "dur": max(us(o["t_end"] - o["t_begin"]), 0.001),
                           "args": {"task": o["task"]}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"level": rec.get("level"), "runtime": rec.get("runtime"), "status": rec.get("status"),
                          "wall_ns": rec.get("wall_ns")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", help="output_prefix directory or an l2_perf_records.json")
    ap.add_argument("-o", "--output", help="trace file (default: <input dir>/swimlane_trace.json)")
    ap.add_argument("--func-names", help="JSON {func_id: name} for nicer labels")
    ns = ap.parse_args(argv)
    names = None
    if ns.func_names:
        with open(ns.func_names) as f:
            data = json.load(f)
        names = data.get("callable_id_to_name", data)
    trace = convert(ns.input, names)
    src = Path(ns.input)
    out = Path(ns.output) if ns.output else (src if src.is_dir() else src.parent) / "swimlane_trace.json"
    with open(out, "w") as f:
        json.dump(trace, f)
    print(f"wrote {out} ({len(trace['traceEvents'])} events)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
