"""Checksums and aws-chunked uploads.

Over plain HTTP botocore puts its default CRC32 in a header and signs the
payload; over HTTPS it streams the body as aws-chunked with the CRC32 in a
trailer (STREAMING-UNSIGNED-PAYLOAD-TRAILER). The suite runs on loopback HTTP,
so the ``trailer_s3`` fixture makes botocore believe the endpoint is HTTPS
when it chooses where to put the checksum, which gives exactly the requests
it sends to real S3.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import urllib.parse
import zlib

import botocore.httpchecksum
import pytest
from awscrt import checksums as crt_checksums
from boto3.s3.transfer import TransferConfig
from botocore.awsrequest import AWSRequest

from s3util import REGION, MiB, expect_error, object_bytes, random_bytes, send_raw, signed_request, sigv4_sign


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def crc32c_b64(data: bytes) -> str:
    return base64.b64encode(crt_checksums.crc32c(data).to_bytes(4, "big")).decode()


def sha256_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


class SentHeaders:
    """Records the headers of every request a client sends."""

    def __init__(self, client):
        self.requests: list[dict[str, str]] = []
        client.meta.events.register("before-send.s3", self._record)

    def _record(self, request, **_):
        self.requests.append({k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()})

    def last(self) -> dict[str, str]:
        assert self.requests, "no request was sent"
        return self.requests[-1]


@pytest.fixture
def trailer_s3(client_factory, monkeypatch):
    real_urlparse = botocore.httpchecksum.urlparse

    def as_https(url, *args, **kwargs):
        return real_urlparse(url, *args, **kwargs)._replace(scheme="https")

    monkeypatch.setattr(botocore.httpchecksum, "urlparse", as_https)
    return client_factory()


def test_default_put_sends_crc32_and_round_trips(client_factory, bucket):
    s3 = client_factory()
    sent = SentHeaders(s3)
    data = random_bytes(MiB + 17)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    assert sent.last().get("x-amz-checksum-crc32") == crc32_b64(data)
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    assert got.get("ChecksumCRC32") == crc32_b64(data)


def test_aws_chunked_trailer_put(trailer_s3, bucket, target, store_kind):
    sent = SentHeaders(trailer_s3)
    data = random_bytes(3 * MiB + 5)  # several 1 MiB aws-chunks and a short one
    trailer_s3.put_object(Bucket=bucket, Key="chunked", Body=data, ContentType="application/x-chunked")
    hdrs = sent.last()
    assert hdrs.get("x-amz-content-sha256") == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    assert "aws-chunked" in hdrs.get("content-encoding", "")
    assert hdrs.get("x-amz-trailer") == "x-amz-checksum-crc32"
    assert hdrs.get("x-amz-decoded-content-length") == str(len(data))

    got = trailer_s3.get_object(Bucket=bucket, Key="chunked", ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    assert got["ContentLength"] == len(data)
    assert got["ContentType"] == "application/x-chunked"
    if not (target == "store" and store_kind == "versitygw"):  # versitygw keeps it
        assert got.get("ContentEncoding") in (None, ""), "aws-chunked must not leak into the stored object"
    assert got.get("ChecksumCRC32") == crc32_b64(data)


def test_aws_chunked_trailer_empty_object(trailer_s3, bucket):
    trailer_s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    got = trailer_s3.get_object(Bucket=bucket, Key="empty")
    assert got["ContentLength"] == 0
    assert got["Body"].read() == b""


def test_aws_chunked_trailer_multipart_transfer(trailer_s3, bucket):
    data = random_bytes(20 * MiB)
    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, max_concurrency=4)
    trailer_s3.upload_fileobj(io.BytesIO(data), bucket, "mp-chunked", Config=cfg)
    got = trailer_s3.get_object(Bucket=bucket, Key="mp-chunked")
    assert got["ETag"].strip('"').endswith("-3")
    assert hashlib.sha256(got["Body"].read()).digest() == hashlib.sha256(data).digest()


@pytest.mark.parametrize(
    ("algorithm", "field", "expected"),
    [
        ("CRC32", "ChecksumCRC32", crc32_b64),
        ("CRC32C", "ChecksumCRC32C", crc32c_b64),
        ("SHA256", "ChecksumSHA256", sha256_b64),
    ],
)
@pytest.mark.parametrize("chunked", [False, True], ids=["header", "trailer"])
def test_explicit_checksum_algorithm(client_factory, trailer_s3, bucket, algorithm, field, expected, chunked):
    s3 = trailer_s3 if chunked else client_factory()
    data = random_bytes(2 * MiB + 3)
    put = s3.put_object(Bucket=bucket, Key="c", Body=data, ChecksumAlgorithm=algorithm)
    assert put.get(field) == expected(data)
    got = s3.get_object(Bucket=bucket, Key="c", ChecksumMode="ENABLED")
    assert got.get(field) == expected(data)
    assert got["Body"].read() == data  # botocore validates the checksum while reading
    head = s3.head_object(Bucket=bucket, Key="c", ChecksumMode="ENABLED")
    assert head.get(field) == expected(data)


def test_ranged_get_with_checksum_mode(client_factory, bucket):
    s3 = client_factory()
    data = random_bytes(MiB)
    s3.put_object(Bucket=bucket, Key="r", Body=data, ChecksumAlgorithm="CRC32")
    # Fill a cache with the whole object first.
    assert s3.get_object(Bucket=bucket, Key="r", ChecksumMode="ENABLED")["Body"].read() == data
    # A whole-object checksum on a 206 would make botocore fail the read.
    for rng, want in (("bytes=0-9", data[:10]), ("bytes=-5", data[-5:]), ("bytes=1000-", data[1000:])):
        got = s3.get_object(Bucket=bucket, Key="r", Range=rng, ChecksumMode="ENABLED")
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["Body"].read() == want
        assert got.get("ChecksumCRC32") in (None, crc32_b64(want))


# --- aws-chunked with signed chunks (what SDKs send over plain HTTP) ---------

STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _signing_key(secret: str, date: str) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _signed_chunked_put(endpoint, creds, bucket, key, data, chunk_size=64 * 1024, tamper=False, extra=None, query=""):
    chunks = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)] + [b""]
    encoded_len = 0
    for c in chunks:
        encoded_len += len(f"{len(c):x};chunk-signature=") + 64 + 2 + len(c) + 2
    path = f"/{bucket}/{key}" + (f"?{query}" if query else "")
    headers = {
        "Content-Encoding": "aws-chunked",
        "X-Amz-Decoded-Content-Length": str(len(data)),
        "Content-Length": str(encoded_len),
        **(extra or {}),
    }
    signed = sigv4_sign(AWSRequest(method="PUT", url=endpoint + path, headers=headers), creds, STREAMING_SIGNED)
    amz_date = signed["X-Amz-Date"]
    prev = signed["Authorization"].rsplit("Signature=", 1)[1]
    scope = f"{amz_date[:8]}/{REGION}/s3/aws4_request"
    skey = _signing_key(creds.secret_key, amz_date[:8])
    body = bytearray()
    for i, c in enumerate(chunks):
        sts = "\n".join(
            ["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev, EMPTY_SHA256, hashlib.sha256(c).hexdigest()]
        )
        sig = hmac.new(skey, sts.encode(), hashlib.sha256).hexdigest()
        if tamper and i == 1:  # flip a payload byte of the second chunk after signing it
            c = bytes([c[0] ^ 0xFF]) + c[1:]
        body += f"{len(c):x};chunk-signature={sig}\r\n".encode() + c + b"\r\n"
        prev = sig
    assert len(body) == encoded_len
    return send_raw(endpoint, "PUT", path, signed, bytes(body))


@pytest.mark.parametrize("extra", [{}, {"x-amz-tagging": "a=1"}], ids=["typed", "passed-through"])
def test_signed_aws_chunked_put(endpoint, creds, s3, bucket, target, store_kind, extra):
    data = random_bytes(300 * 1024 + 11)
    resp = _signed_chunked_put(endpoint, creds, bucket, "signed-chunks", data, extra=extra)
    assert resp.status == 200, resp.body
    assert resp.headers["etag"].strip('"') == hashlib.md5(data).hexdigest()
    got = s3.get_object(Bucket=bucket, Key="signed-chunks")
    assert got["Body"].read() == data
    if not (target == "store" and store_kind == "versitygw"):  # versitygw keeps it
        assert got.get("ContentEncoding") in (None, ""), "aws-chunked must not leak into the stored object"


@pytest.mark.parametrize("extra", [{}, {"x-amz-tagging": "a=1"}], ids=["typed", "passed-through"])
def test_signed_aws_chunked_put_tampered_chunk(endpoint, creds, s3, bucket, extra):
    s3.put_object(Bucket=bucket, Key="signed-chunks", Body=b"original")
    data = random_bytes(300 * 1024)
    resp = _signed_chunked_put(endpoint, creds, bucket, "signed-chunks", data, tamper=True, extra=extra)
    assert resp.status == 403, resp.body
    assert resp.error_code == "SignatureDoesNotMatch"
    assert object_bytes(s3, bucket, "signed-chunks") == b"original"


def test_signed_aws_chunked_part_tampered_chunk(endpoint, creds, s3, bucket):
    """A part whose chunk signature fails is refused and never recorded:
    nothing of it shows in ListParts, and the upload completes with the
    part sent again."""
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    data = random_bytes(300 * 1024)
    query = urllib.parse.urlencode({"partNumber": "1", "uploadId": up}, quote_via=urllib.parse.quote)
    resp = _signed_chunked_put(endpoint, creds, bucket, "mp", data, tamper=True, query=query)
    assert resp.status == 403, resp.body
    assert resp.error_code == "SignatureDoesNotMatch"
    assert s3.list_parts(Bucket=bucket, Key="mp", UploadId=up).get("Parts", []) == []
    resp = _signed_chunked_put(endpoint, creds, bucket, "mp", data, query=query)
    assert resp.status == 200, resp.body
    etag = resp.headers["etag"]
    assert etag.strip('"') == hashlib.md5(data).hexdigest()
    s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}
    )
    assert object_bytes(s3, bucket, "mp") == data


@pytest.mark.parametrize("extra", [{}, {"x-amz-tagging": "a=1"}], ids=["typed", "passed-through"])
def test_put_with_wrong_payload_hash(endpoint, creds, s3, bucket, extra):
    """A body that does not match its signed SHA-256 changes nothing: hoard
    forwards the hash, so the store checks it too, and a body cut short
    when hoard's own check fails is never committed (a PUT with tagging
    passes through)."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"original")
    data = random_bytes(300 * 1024)
    resp = signed_request(
        endpoint,
        creds,
        "PUT",
        f"/{bucket}/k",
        headers=dict(extra),
        body=data,
        content_sha256=hashlib.sha256(b"other").hexdigest(),
    )
    assert resp.status in (400, 403), resp.body
    assert object_bytes(s3, bucket, "k") == b"original"
    good = signed_request(
        endpoint,
        creds,
        "PUT",
        f"/{bucket}/k",
        headers=dict(extra),
        body=data,
        content_sha256=hashlib.sha256(data).hexdigest(),
    )
    assert good.status == 200, good.body
    assert object_bytes(s3, bucket, "k") == data


def test_put_with_wrong_crc32_header(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"original")
    expect_error(
        lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"replacement", ChecksumCRC32=crc32_b64(b"something else")),
        400,
        "BadDigest",
        "XAmzContentChecksumMismatch",
        "InvalidRequest",
    )
    assert object_bytes(s3, bucket, "k") == b"original"


def test_put_with_wrong_content_md5(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"original")
    wrong = base64.b64encode(hashlib.md5(b"not the body").digest()).decode()
    expect_error(
        lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"replacement", ContentMD5=wrong),
        400,
        "BadDigest",
    )
    assert object_bytes(s3, bucket, "k") == b"original"


def test_put_with_malformed_content_md5(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"original")
    expect_error(
        lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"replacement", ContentMD5="not-base64!"),
        400,
        "InvalidDigest",
    )
    assert object_bytes(s3, bucket, "k") == b"original"
