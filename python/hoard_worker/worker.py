"""The worker's loop: read requests on fd 3, run handlers, answer on fd 4.

See the package's docstring for the protocol. One invocation runs at a time,
on the main thread. Handlers are imported once per handler string and kept
(warm); a failed import is not kept, so the next invocation tries again.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import decimal
import importlib
import io
import json
import logging
import os
import platform
import secrets
import signal
import sys
import time
import traceback
from typing import Any

from hoard_worker.context import MAX_TIMEOUT_MS, LambdaContext

# The agent's pipes, as the agent passes them.
REQUESTS_FD = 3
ANSWERS_FD = 4

# NONCE_ENV holds the per-worker secret of the end-of-invocation markers.
# The worker removes it from its environment, so functions and the processes
# they start do not see it.
NONCE_ENV = "HOARD_WORKER_NONCE"

# MARKER_PREFIX starts the end-of-invocation marker line, which is
# MARKER_PREFIX + nonce + ":" + hex(UTF-8 of the request id). The worker
# writes it after a newline, so it is a line of its own even after output
# that did not end with one; the agent drops that extra empty line with the
# marker. internal/worker (Go) has the same constant.
MARKER_PREFIX = "@@hoard-worker-end:"

LOG_FORMAT = "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s"


class HandlerError(Exception):
    """A handler that cannot be loaded: its type names why, as in answers."""

    def __init__(self, kind: str, message: str, tb: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.traceback = tb


def _safe_str(e: BaseException) -> str:
    try:
        return str(e)
    except Exception:
        return f"<unprintable {type(e).__name__}>"


def _format_exception(e: BaseException, skip_first: bool) -> str:
    """The traceback of e; skip_first leaves out the worker's own frame."""
    tb = e.__traceback__
    if skip_first and tb is not None:
        tb = tb.tb_next
    try:
        return "".join(traceback.format_exception(type(e), e, tb))
    except Exception:
        return f"{type(e).__name__}: {_safe_str(e)}\n"


def _json_default(o: Any) -> Any:
    # As the Lambda runtime: Decimals (from DynamoDB, say) become numbers.
    if isinstance(o, decimal.Decimal):
        return float(o)
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


class Handlers:
    """The loaded handlers, by handler string ("module.function")."""

    def __init__(self) -> None:
        self._loaded: dict[str, Any] = {}

    def get(self, spec: Any) -> Any:
        """The callable named by spec, importing its module the first time.

        Raises HandlerError: MalformedHandlerName, ImportError (the module
        cannot be imported, whatever it raised), HandlerNotFound (no such
        attribute, or it is not callable).
        """
        if not isinstance(spec, str):
            raise HandlerError("MalformedHandlerName", f"Bad handler {spec!r}: want a string MODULE.FUNCTION")
        fn = self._loaded.get(spec)
        if fn is not None:
            return fn
        module_name, _, attr = spec.rpartition(".")
        # Lambda also accepts "dir/module.function".
        module_name = module_name.replace("/", ".")
        if not module_name or not attr:
            raise HandlerError("MalformedHandlerName", f"Bad handler {spec!r}: want MODULE.FUNCTION")
        try:
            module = importlib.import_module(module_name)
        except BaseException as e:
            why = _safe_str(e) if isinstance(e, ImportError) else f"{type(e).__name__}: {_safe_str(e)}"
            raise HandlerError(
                "ImportError", f"Unable to import module {module_name!r}: {why}", _format_exception(e, True)
            ) from None
        try:
            fn = getattr(module, attr)
        except AttributeError:
            raise HandlerError("HandlerNotFound", f"Handler {attr!r} missing on module {module_name!r}") from None
        if not callable(fn):
            raise HandlerError(
                "HandlerNotFound", f"Handler {spec!r} is not callable (it is a {type(fn).__name__})"
            ) from None
        self._loaded[spec] = fn
        return fn


class _RequestIdFilter(logging.Filter):
    """Stamps log records with the running invocation's request id."""

    def __init__(self, worker: Worker) -> None:
        super().__init__()
        self._worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        record.aws_request_id = self._worker.request_id
        return True


def _libc_fflush() -> Any:
    try:
        libc = ctypes.CDLL(None)
        fflush = libc.fflush
        fflush.argtypes = [ctypes.c_void_p]
        return fflush
    except Exception:
        return None


class Worker:
    """Serves the agent's requests until shutdown or the end of fd 3."""

    def __init__(self, requests_fd: int, answers_fd: int, nonce: str) -> None:
        self.requests = os.fdopen(requests_fd, "rb")
        self.answers_fd = answers_fd
        self.nonce = nonce
        self.handlers = Handlers()
        self.request_id = ""
        self.log_stream_name = f"{time.strftime('%Y/%m/%d', time.gmtime())}/[$LATEST]{secrets.token_hex(16)}"
        self._fflush = _libc_fflush()

    def serve(self) -> int:
        while True:
            line = self.requests.readline()
            if not line:
                return 0
            line = line.strip()
            if not line:
                continue
            try:
                req = json.loads(line)
            except ValueError as e:
                self._note(f"bad request (not JSON: {e}); ignored")
                continue
            kind = req.get("type") if isinstance(req, dict) else None
            if kind == "shutdown":
                return 0
            if kind == "invoke":
                self.invoke(req)
            else:
                self._note(f"unknown request type {kind!r}; ignored")

    def invoke(self, req: dict[str, Any]) -> None:
        rid = req.get("request_id")
        rid = "" if rid is None else str(rid)
        start = time.perf_counter()
        timeout_ms = req.get("timeout_ms")
        if not isinstance(timeout_ms, (int, float)) or timeout_ms <= 0:
            timeout_ms = MAX_TIMEOUT_MS
        deadline = time.monotonic() + timeout_ms / 1000
        self.request_id = rid
        try:
            answer = self._run(req, rid, deadline)
        finally:
            self.request_id = ""
        answer["duration_ms"] = (time.perf_counter() - start) * 1000
        self._end_log(rid)
        self._answer(answer)

    def _run(self, req: dict[str, Any], rid: str, deadline: float) -> dict[str, Any]:
        answer: dict[str, Any] = {"type": "result", "request_id": rid}
        function = req.get("function")
        function = "" if function is None else str(function)
        memory = req.get("memory_limit_mb")
        if not isinstance(memory, int) or isinstance(memory, bool):
            memory = 0
        try:
            fn = self.handlers.get(req.get("handler"))
        except HandlerError as e:
            return self._error(answer, e.kind, e.message, e.traceback)
        ctx = LambdaContext(
            request_id=rid,
            function_name=function,
            memory_limit_mb=memory,
            deadline=deadline,
            log_stream_name=self.log_stream_name,
        )
        try:
            result = fn(req.get("event"), ctx)
        except BaseException as e:
            # SystemExit and KeyboardInterrupt too: the worker keeps serving.
            return self._error(answer, type(e).__name__, _safe_str(e), _format_exception(e, True))
        try:
            payload = json.dumps(result, default=_json_default, allow_nan=False)
        except Exception as e:
            return self._error(answer, "ResultNotSerializable", f"Unable to marshal the result: {_safe_str(e)}")
        answer["ok"] = True
        answer["result"] = _Raw(payload)
        return answer

    def _error(self, answer: dict[str, Any], kind: str, message: str, tb: str = "") -> dict[str, Any]:
        # Into the log as well, as Lambda does.
        text = f"[ERROR] {kind}: {message}\n"
        if tb:
            text += tb if tb.endswith("\n") else tb + "\n"
        with contextlib.suppress(Exception):
            sys.__stderr__.write(text)
        answer["ok"] = False
        answer["error"] = {"type": kind, "message": message, "traceback": tb}
        return answer

    def _flush(self) -> None:
        for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                s.flush()
        for h in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                h.flush()
        # C code's stdio buffers (a pipe makes stdout fully buffered there).
        if self._fflush is not None:
            with contextlib.suppress(Exception):
                self._fflush(None)

    def _end_log(self, rid: str) -> None:
        """Flushes the log and marks the end of the invocation on both streams."""
        self._flush()
        hex_id = rid.encode("utf-8", "surrogatepass").hex()
        marker = f"\n{MARKER_PREFIX}{self.nonce}:{hex_id}\n".encode("ascii")
        for fd in (1, 2):
            # A stream the function closed: the agent sees its end instead.
            with contextlib.suppress(OSError):
                os.write(fd, marker)

    def _answer(self, answer: dict[str, Any]) -> None:
        raw = answer.pop("result", None)
        text = json.dumps(answer, ensure_ascii=True)
        if raw is not None:
            text = text[:-1] + ', "result": ' + raw.text + "}"
        self._write(text.encode("ascii") + b"\n")

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.answers_fd, view)
                view = view[n:]
        except OSError as e:
            # The agent is gone: nothing to serve.
            self._note(f"cannot answer the agent ({e}); exiting")
            self._flush()
            os._exit(1)

    def ready(self) -> None:
        msg = {"type": "ready", "pid": os.getpid(), "python": platform.python_version()}
        self._write(json.dumps(msg).encode("ascii") + b"\n")

    def _note(self, text: str) -> None:
        try:
            sys.__stderr__.write(f"hoard_worker: {text}\n")
            sys.__stderr__.flush()
        except Exception:
            pass


class _Raw:
    """An already encoded JSON value (ASCII only)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _configure_stdio() -> None:
    for s in (sys.stdout, sys.stderr):
        if isinstance(s, io.TextIOWrapper):
            s.reconfigure(encoding="utf-8", errors="backslashreplace", line_buffering=True, write_through=True)


def _configure_logging(worker: Worker) -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter(LOG_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    handler.addFilter(_RequestIdFilter(worker))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Runs the worker; returns (or exits with) its exit status."""
    parser = argparse.ArgumentParser(prog="python -m hoard_worker", description="hoard's function worker")
    parser.add_argument("--code", required=True, help="the application's code directory")
    args = parser.parse_args(argv)
    code = os.path.abspath(args.code)
    if not os.path.isdir(code):
        print(f"hoard_worker: --code {code}: not a directory", file=sys.stderr)
        return 2
    os.chdir(code)
    if sys.path:
        sys.path[0] = code
    else:
        sys.path.insert(0, code)
    nonce = os.environ.pop(NONCE_ENV, "") or secrets.token_hex(16)
    # Move the agent's pipes off fds 3 and 4: the copies are not inherited
    # by processes functions start, and functions get 3 and 4 for files.
    try:
        requests_fd = os.dup(REQUESTS_FD)
        answers_fd = os.dup(ANSWERS_FD)
    except OSError as e:
        print(f"hoard_worker: fds 3 and 4 must be the agent's pipes: {e}", file=sys.stderr)
        return 2
    os.close(REQUESTS_FD)
    os.close(ANSWERS_FD)
    # The agent ends the worker; a terminal's Ctrl-C is not for it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _configure_stdio()
    worker = Worker(requests_fd, answers_fd, nonce)
    _configure_logging(worker)
    print(f"hoard_worker: pid {os.getpid()}, python {platform.python_version()}, code {code}", file=sys.stderr)
    # The start-up output ends like an invocation's (request id ""), so
    # the agent knows none of it belongs to the first invocation.
    worker._end_log("")
    worker.ready()
    status = worker.serve()
    worker._flush()
    # Not sys.exit: threads a function left running must not keep it alive.
    os._exit(status)
