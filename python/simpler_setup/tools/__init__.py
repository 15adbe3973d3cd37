"""Analysis tools for the diagnostics a run writes under output_prefix:

    swimlane_converter   l2_perf_records.json -> Chrome Trace Event JSON (Perfetto)
    args_dump            args_dump/ -> NumPy arrays per task argument
    deps                 deps.json -> a graph summary / DOT
"""
