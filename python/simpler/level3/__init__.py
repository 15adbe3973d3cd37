"""Level 3 and up: one host driving several chips through child processes.

    Worker(3, platform="cpu" | "cuda", device_ids=[...], num_sub_workers=N)

is a level3.worker.HierWorker (Worker.__new__ picks it). Modules, one
concern each: layout (mailbox bytes), endpoint (a child seen from the
parent), child (a child's loop), engine (scheduler over the TensorMap),
orchestrator (what fn(orch, args, cfg) calls), callables (registry),
memory (device memory and shared buffers), args (a sub-task's view),
domain / cuda_domain (communication domains), shm (mapping segments in a
child).
"""
