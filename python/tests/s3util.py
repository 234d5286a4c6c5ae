"""Helpers shared by the end-to-end tests (raw signed requests, error checks)."""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

REGION = "us-east-1"
MiB = 1024 * 1024


def random_bytes(n: int) -> bytes:
    return os.urandom(n)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def error_code(self) -> str | None:
        return xml_error_code(self.body)


def xml_error_code(body: bytes) -> str | None:
    """The <Code> of an S3 XML error document, or None if body is not one."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    if root.tag.rsplit("}", 1)[-1] != "Error":
        return None
    for child in root:
        if child.tag.rsplit("}", 1)[-1] == "Code":
            return child.text
    return None


def client_error(excinfo) -> tuple[int, str]:
    """(HTTP status, S3 error code) of a botocore ClientError."""
    exc = excinfo.value if hasattr(excinfo, "value") else excinfo
    assert isinstance(exc, ClientError), f"expected ClientError, got {exc!r}"
    status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
    code = exc.response.get("Error", {}).get("Code", "")
    return status, code


def expect_error(fn, status: int, *codes: str) -> ClientError:
    """Call fn, assert it raises a ClientError with status and one of codes."""
    with pytest.raises(ClientError) as excinfo:
        fn()
    got_status, got_code = client_error(excinfo)
    assert got_status == status, f"status {got_status} ({got_code}), want {status} {codes}"
    if codes:
        assert got_code in codes, f"error code {got_code!r}, want one of {codes} (status {got_status})"
    return excinfo.value


class RawS3SigV4Auth(S3SigV4Auth):
    """S3 SigV4 over the request path as given, with an optional fixed
    x-amz-content-sha256 (botocore's signer always recomputes it)."""

    def __init__(self, credentials, service_name, region_name, content_sha256: str | None = None):
        super().__init__(credentials, service_name, region_name)
        self._content_sha256 = content_sha256

    def payload(self, request):
        if self._content_sha256 is not None:
            return self._content_sha256
        return super().payload(request)


def sigv4_sign(req: AWSRequest, creds, content_sha256: str | None = None) -> dict[str, str]:
    """Sign req in place (SigV4, S3 flavour); returns its headers."""
    auth = RawS3SigV4Auth(Credentials(creds.access_key, creds.secret_key), "s3", REGION, content_sha256)
    auth.add_auth(req)
    return dict(req.headers.items())


def quote_key(key: str) -> str:
    """Percent-encode an object key for a request path (S3 style, keeps /)."""
    return urllib.parse.quote(key, safe="/~")


def signed_request(
    endpoint: str,
    creds,
    method: str,
    path: str,
    *,
    query: str = "",
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    content_sha256: str | None = None,
    sign: bool = True,
    timeout: float = 60,
) -> RawResponse:
    """Send a request with a SigV4 signature over exactly the given raw path.

    path must already be percent-encoded; it is signed and sent verbatim (S3
    does not normalise paths, so neither does the signer), which lets tests
    send things a well-behaved SDK would refuse to (``..`` segments, NULs).
    """
    url = endpoint.rstrip("/") + path + (f"?{query}" if query else "")
    hdrs = dict(headers or {})
    if sign:
        hdrs = sigv4_sign(AWSRequest(method=method, url=url, headers=hdrs, data=body), creds, content_sha256)
    elif content_sha256 is not None:
        hdrs["X-Amz-Content-SHA256"] = content_sha256
    return send_raw(endpoint, method, path + (f"?{query}" if query else ""), hdrs, body, timeout=timeout)


def send_raw(
    endpoint: str, method: str, target: str, headers: dict[str, str], body, timeout: float = 60
) -> RawResponse:
    parsed = urllib.parse.urlsplit(endpoint)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=timeout)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        if isinstance(body, (bytes, bytearray)):
            if "content-length" not in {k.lower() for k in headers} and (body or method in ("PUT", "POST")):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body if body else None)
        else:  # an iterable of chunks, sent as-is (caller sets framing headers)
            conn.endheaders()
            for chunk in body:
                conn.send(chunk)
        resp = conn.getresponse()
        data = resp.read()
        return RawResponse(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def object_bytes(client, bucket: str, key: str) -> bytes | None:
    """The object's bytes, or None if it does not exist."""
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return None
        raise


def list_keys(client, bucket: str, **kwargs) -> list[str]:
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, **kwargs):
        keys.extend(o["Key"] for o in page.get("Contents", []))
    return keys
