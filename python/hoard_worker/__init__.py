"""hoard's function worker: runs AWS-Lambda-style handlers for a node agent.

The agent starts ``python -m hoard_worker --code DIR`` in the application's
code directory with two extra pipes (see docs/adr/0009-local-platform.md,
"Worker protocol"):

- fd 3 carries requests to the worker, one JSON object per line:
  ``{"type": "invoke", "request_id", "function", "handler", "event",
  "timeout_ms", "memory_limit_mb"}`` or ``{"type": "shutdown"}``;
- fd 4 carries answers: first ``{"type": "ready", "pid", "python"}``, then one
  ``{"type": "result", "request_id", "ok", "result" | "error", "duration_ms"}``
  per invocation.

stdout and stderr are the functions' log. After every invocation the worker
flushes them and writes an end-of-invocation marker line on each, holding the
per-worker nonce the agent gave it in ``$HOARD_WORKER_NONCE``, so the agent
knows it has the invocation's whole log; its start-up output ends the same
way (request id ""), before "ready". Only the standard library is used.
"""

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Runs the worker (see ``hoard_worker.worker.main``)."""
    from hoard_worker.worker import main as run

    return run(argv)
