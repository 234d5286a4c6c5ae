"""Machinery of the differential test (test_differential.py).

A case is a function of a ``Ctx``: it performs a few S3 calls, each
recorded as a normalised ``step`` (status, error code, the headers that
matter, the body), and the test runs it twice, against the store directly
and through hoard, each time in a fresh bucket, and compares the steps.

Normalising removes what legitimately differs between two runs: request
ids, dates, owners, upload and version ids, continuation tokens, bucket
names and the endpoint. Everything else must be equal.
"""

from __future__ import annotations

import hashlib
import http.client
import itertools
import json
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

# How long a client waits for an answer: above hoard's own deadlines (3 s
# for a store call, 5 s without progress on a body), so that a request
# that hangs shows as a difference rather than as a stalled suite.
READ_TIMEOUT_S = 6

# Response headers compared by value.
VALUE_HEADERS = (
    "etag",
    "content-length",
    "content-type",
    "content-range",
    "content-encoding",
    "content-disposition",
    "content-language",
    "cache-control",
    "expires",
    "accept-ranges",
    "x-amz-tagging-count",
    "x-amz-storage-class",
    "x-amz-delete-marker",
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-object-lock-legal-hold",
    "x-amz-server-side-encryption",
    "x-amz-checksum-type",
    "x-amz-mp-parts-count",
    "x-amz-website-redirect-location",
    "x-amz-bucket-region",
    "location",
)
# Response headers compared by presence only (their values differ per run).
PRESENCE_HEADERS = ("last-modified", "x-amz-version-id", "x-amz-copy-source-version-id")
# Response headers compared by value when their name starts with one of these.
VALUE_PREFIXES = ("x-amz-meta-", "x-amz-checksum-")

# Steps (boto3 operations, raw methods) whose Accept-Ranges is compared.
READ_OPS = ("get_object ", "head_object ", "get ", "head ")

# XML elements dropped before comparing: they differ on every run.
DROP_ELEMENTS = {
    "RequestId",
    "HostId",
    "LastModified",
    "CreationDate",
    "Initiated",
    "Owner",
    "Initiator",
    "Date",
}
# XML elements whose non-empty value is replaced by a placeholder.
MASK_ELEMENTS = {
    "UploadId",
    "NextUploadIdMarker",
    "UploadIdMarker",
    "ContinuationToken",
    "NextContinuationToken",
    "VersionIdMarker",
    "NextVersionIdMarker",
    "DeleteMarkerVersionId",
}


@dataclass
class Target:
    """One side of the comparison: S3 clients and raw access to an endpoint."""

    name: str
    clients: list  # boto3 clients; calls rotate over them
    endpoints: list[str]
    creds: Any  # conftest.Creds
    sigv2: list  # boto3 clients presigning with SigV2
    store: Any  # a boto3 client on the store itself, to arrange things behind the target's back


class Rotating:
    """Each attribute access returns the next client's attribute, so that
    the calls of one case spread over every cachelet of a ring."""

    def __init__(self, clients: list):
        self._cycle = itertools.cycle(clients)
        self._clients = clients

    def __getattr__(self, name: str):
        return getattr(next(self._cycle), name)


class Recorder:
    """Keeps the raw body of the last non-streaming response (after-call)."""

    def __init__(self):
        self.raw: bytes | None = None

    def after_call(self, http_response=None, model=None, **_):
        self.raw = None
        if http_response is None or model is None:
            return
        if model.has_streaming_output and http_response.status_code < 300:
            return  # the body is the caller's to read
        self.raw = http_response.content


def attach_recorder(client, recorder: Recorder) -> None:
    client.meta.events.register("after-call.s3", recorder.after_call)


@dataclass
class Ctx:
    """What a case gets: a client on its target, a fresh bucket, raw access."""

    target: Target
    prefix: str  # what every bucket name of this run starts with (new_bucket_prefix)
    bucket: str
    recorder: Recorder
    steps: list = field(default_factory=list)

    def __post_init__(self):
        self.s3 = Rotating(self.target.clients)
        self._endpoints = itertools.cycle(self.target.endpoints)
        self.sigv2 = Rotating(self.target.sigv2)
        self.store = self.target.store

    @property
    def endpoint(self) -> str:
        return next(self._endpoints)

    def bucket_named(self, suffix: str) -> str:
        """Another bucket name for this case, unique to this target's run."""
        return f"{self.bucket[: 63 - len(suffix) - 1]}-{suffix}"

    # --- calls -------------------------------------------------------------

    def call(self, op: str, /, keep: Callable[[dict], Any] | None = None, **kwargs) -> dict:
        """Call a boto3 operation and record its outcome; return the parsed
        response (or {} on an error). keep, given the parsed response,
        returns extra data recorded with the step (e.g. a parsed field that
        is not in the headers or the raw body)."""
        self.recorder.raw = None
        try:
            resp = getattr(self.s3, op)(**kwargs)
        except ClientError as exc:
            meta = exc.response.get("ResponseMetadata", {})
            self.steps.append(
                self.record(
                    op,
                    meta.get("HTTPStatusCode"),
                    exc.response.get("Error", {}).get("Code"),
                    meta.get("HTTPHeaders", {}),
                    self.recorder.raw,
                )
            )
            return {}
        except BotoCoreError as exc:
            # Refused by the client (parameter validation), or no answer in
            # time (a hung request shows as ReadTimeoutError).
            self.steps.append({"op": op, "client_error": type(exc).__name__})
            return {}
        meta = resp.get("ResponseMetadata", {})
        body = self.recorder.raw
        if hasattr(resp.get("Body"), "read"):
            body = resp["Body"].read()
        step = self.record(op, meta.get("HTTPStatusCode"), None, meta.get("HTTPHeaders", {}), body)
        if keep is not None:
            step["kept"] = self.norm_value(keep(resp))
        self.steps.append(step)
        return resp

    def quiet(self, op: str, /, **kwargs) -> dict:
        """Call an operation whose outcome is set-up, not compared."""
        try:
            return getattr(self.s3, op)(**kwargs)
        except ClientError:
            return {}

    def raw(
        self,
        method: str,
        path: str,
        *,
        query: str = "",
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        sign: bool = True,
        label: str = "",
    ) -> None:
        """Send a SigV4-signed request over exactly this (encoded) path."""
        from s3util import signed_request

        label = label or f"{method} {path}"
        path = path.replace("{bucket}", self.bucket)
        try:
            resp = signed_request(
                self.endpoint,
                self.target.creds,
                method,
                path,
                query=query,
                headers=headers,
                body=body,
                sign=sign,
                timeout=READ_TIMEOUT_S,
            )
        except OSError as exc:
            self.steps.append({"op": label, "client_error": type(exc).__name__})
            return
        self.steps.append(self.record(label, resp.status, None, resp.headers, resp.body))

    def presigned(self, method: str, op: str, params: dict, *, sigv2: bool = False, body: bytes = b"", headers=None):
        """Presign op (SigV4, or SigV2 with sigv2) and send it with method."""
        client = self.sigv2 if sigv2 else self.s3
        url = client.generate_presigned_url(op, Params=params, ExpiresIn=600)
        self.url(method, url, body=body, headers=headers, label=f"presigned {'v2' if sigv2 else 'v4'} {op}")

    def url(self, method: str, url: str, *, body: bytes = b"", headers=None, label: str = "") -> None:
        """Send an unsigned request to a full URL (a presigned one)."""
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=READ_TIMEOUT_S)
        label = label or method
        try:
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.putrequest(method, target, skip_accept_encoding=True)
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            if body or method in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
        except OSError as exc:
            self.steps.append({"op": label, "client_error": type(exc).__name__})
            return
        finally:
            conn.close()
        self.steps.append(self.record(label, resp.status, None, hdrs, data))

    # --- normalisation ------------------------------------------------------

    def norm_text(self, s: str) -> str:
        for ep in self.target.endpoints:
            s = s.replace(ep, "<endpoint>").replace(urllib.parse.urlsplit(ep).netloc, "<host>")
        return s.replace(self.prefix, "<bucket>")

    def norm_value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.norm_text(v)
        if isinstance(v, dict):
            return {k: self.norm_value(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [self.norm_value(x) for x in v]
        return v

    def record(self, op: str, status, code, headers: dict, body: bytes | None) -> dict:
        """One answer, normalised: what the comparison sees of it."""
        h = {k.lower(): v for k, v in (headers or {}).items()}
        ctype = h.get("content-type", "")
        parsed_body = None
        if body:
            parsed_body = self.norm_xml(body) if _looks_xml(ctype, body) else self.norm_other(body)
        if isinstance(parsed_body, dict) and parsed_body.get("tag") == "Error":
            # An error document is compared by its code (and the status):
            # messages and the elements beside the code (BucketName, Key,
            # Resource, ...) are worded and chosen differently by every
            # store, and by hoard for the errors it answers itself.
            code = code or _child_text(parsed_body, "Code")
            parsed_body = None
        kept = {}
        for name in VALUE_HEADERS:
            if name in h:
                kept[name] = self.norm_text(h[name])
        for name in PRESENCE_HEADERS:
            if name in h:
                kept[name] = "null" if h[name] == "null" else "<present>"
        for name, value in h.items():
            if name.startswith(VALUE_PREFIXES):
                kept[name] = value
        if status is None or status >= 300 or not (norm_op(op) + " ").startswith(READ_OPS):
            # MinIO sends it on every answer; it means something on reads.
            kept.pop("accept-ranges", None)
        if not body and (status is None or status >= 300 or norm_op(op).startswith("head_bucket")):
            # The type of a body that is not there (HEAD errors, HeadBucket).
            kept.pop("content-type", None)
        if isinstance(parsed_body, dict) or (status and status >= 300) or not body:
            # Lengths of XML documents and errors follow their formatting.
            kept.pop("content-length", None)
        if "etag" in kept and status and status >= 300 and status not in (304, 412):
            kept.pop("etag")
        return {"op": op, "status": status, "code": code, "headers": kept, "body": parsed_body}

    def norm_other(self, body: bytes) -> str:
        """A body that is not XML, by its digest once bucket names and the
        endpoint are taken out of it as text (a bucket policy is JSON naming
        its bucket)."""
        try:
            text = body.decode()
        except UnicodeDecodeError:
            return _digest(body)
        return _digest(self.norm_text(text).encode())

    def norm_xml(self, body: bytes):
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            return _digest(body)
        return self._norm_el(root)

    def _norm_el(self, el) -> dict:
        tag = el.tag.rsplit("}", 1)[-1]
        text = (el.text or "").strip()
        if tag in MASK_ELEMENTS and text:
            text = "<masked>"
        elif tag in ("VersionId", "Version") and text and text != "null":
            text = "<version>"
        text = self.norm_text(text)
        children = [self._norm_el(c) for c in el if c.tag.rsplit("}", 1)[-1] not in DROP_ELEMENTS]
        # The order of different elements carries no meaning; that of
        # repeated ones (list entries) does, and a stable sort keeps it.
        children.sort(key=lambda c: c["tag"])
        out: dict = {"tag": tag}
        if text:
            out["text"] = text
        if children:
            out["children"] = children
        return out


def norm_op(op: str) -> str:
    return op.lower().replace("presigned v4 ", "").replace("presigned v2 ", "")


def _looks_xml(ctype: str, body: bytes) -> bool:
    return "xml" in ctype or body.lstrip().startswith(b"<?xml")


def _digest(body: bytes) -> str:
    return f"{len(body)} bytes sha256:{hashlib.sha256(body).hexdigest()[:16]}"


def _child_text(node: dict, tag: str):
    for c in node.get("children", []):
        if c["tag"] == tag:
            return c.get("text")
    return None


def new_bucket_prefix() -> str:
    """A bucket name prefix of fixed length, unique per run of a case."""
    return "dt" + uuid.uuid4().hex[:10]


def diff_steps(a: list[dict], b: list[dict]) -> list[str]:
    """Human-readable differences between two runs' steps (empty: equal)."""
    out: list[str] = []
    if len(a) != len(b):
        out.append(f"{len(a)} steps against the store, {len(b)} through hoard")
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x == y:
            continue
        for k in sorted(set(x) | set(y)):
            if x.get(k) == y.get(k):
                continue
            if k == "headers":
                hx, hy = x.get(k) or {}, y.get(k) or {}
                for name in sorted(set(hx) | set(hy)):
                    if hx.get(name) != hy.get(name):
                        out.append(
                            f"step {i} {x.get('op')}: header {name}: store {hx.get(name)!r}, hoard {hy.get(name)!r}"
                        )
            else:
                out.append(f"step {i} {x.get('op')}: {k}: store {x.get(k)!r}, hoard {y.get(k)!r}")
    return out


DIFFERENCES_FILE = Path(__file__).with_name("s3_differences.json")


@dataclass(frozen=True)
class Difference:
    """A known difference between hoard's answer and the store's."""

    reason: str
    # "pass-through": goes away once hoard relays the operation to the store.
    pending: str | None = None
    # Where it shows: "setup/store" pairs (one or owner; minio or
    # versitygw). Default: everywhere.
    where: tuple[str, ...] = ("one/minio", "one/versitygw", "owner/minio")

    # Where it may show or not, from run to run (timing).
    intermittent: tuple[str, ...] = ()

    def applies(self, setup: str, store: str) -> bool:
        return f"{setup}/{store}" in self.where

    def may_apply(self, setup: str, store: str) -> bool:
        return f"{setup}/{store}" in self.intermittent


def load_differences() -> dict[str, Difference]:
    """The table of known differences, by "client/case" id."""
    raw = json.loads(DIFFERENCES_FILE.read_text())
    out = {}
    for case_id, d in raw.items():
        kw = dict(d)
        for k in ("where", "intermittent"):
            if k in kw:
                kw[k] = tuple(kw[k])
        out[case_id] = Difference(**kw)
    return out
