"""What the tools answer, by tool: jobs (ps, inspect, logs, cancel, retry, and the helpers every result
shares), submit, release, tasks (evaluate, convert_gguf, report), watch (wait, metrics, plot); the estimate
and hardware results (estimate/ fills them) and the dataset report (preflight/dataset/ fills it). Their
parts: progress (where a job is, from its events), attempt_note (which attempt, after what), trackio_run
(where its metrics went), endings (verdict words, blocking alerts, the fix no retry mends, a next step).
Pure models and their markdown, below everything that builds them, so the server declares its tools with
them at start without importing what computes them.
"""
