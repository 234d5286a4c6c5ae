"""Authentication: SigV4 / SigV2 headers, presigned URLs, bad credentials."""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from botocore import UNSIGNED

from conftest import Creds
from s3util import expect_error, object_bytes, xml_error_code

SECRET = b"secret contents"


@pytest.fixture
def secret_obj(s3, bucket):
    s3.put_object(Bucket=bucket, Key="secret.txt", Body=SECRET)
    return bucket, "secret.txt"


def _fetch(url: str, method: str = "GET", data: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, data=data)
    if data is not None:
        # urllib would add a form Content-Type, which SigV2 signs: send none.
        req.add_header("Content-Type", "")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_wrong_secret_key(client_factory, creds, secret_obj):
    bucket, key = secret_obj
    bad = client_factory(creds=Creds(creds.access_key, creds.secret_key + "x"))
    expect_error(lambda: bad.get_object(Bucket=bucket, Key=key), 403, "SignatureDoesNotMatch")
    expect_error(lambda: bad.list_objects_v2(Bucket=bucket), 403, "SignatureDoesNotMatch")
    expect_error(lambda: bad.put_object(Bucket=bucket, Key=key, Body=b"overwritten"), 403, "SignatureDoesNotMatch")
    expect_error(lambda: bad.delete_object(Bucket=bucket, Key=key), 403, "SignatureDoesNotMatch")


def test_unknown_access_key(client_factory, s3, secret_obj, target, store_kind):
    bucket, key = secret_obj
    bad = client_factory(creds=Creds("E2EUNKNOWNACCESSKEY", "whatever-secret-key"))
    if target == "store" and store_kind == "versitygw":
        status, codes = 404, ("XAdminUserNotFound",)  # versitygw's answer
    else:
        status, codes = 403, ("InvalidAccessKeyId",)
    expect_error(lambda: bad.get_object(Bucket=bucket, Key=key), status, *codes)
    expect_error(lambda: bad.list_buckets(), status, *codes)
    expect_error(lambda: bad.put_object(Bucket=bucket, Key=key, Body=b"overwritten"), status, *codes)
    assert object_bytes(s3, bucket, key) == SECRET


def test_unsigned_request(client_factory, s3, secret_obj):
    bucket, key = secret_obj
    anon = client_factory(signature_version=UNSIGNED)
    expect_error(lambda: anon.get_object(Bucket=bucket, Key=key), 403, "AccessDenied")
    expect_error(lambda: anon.list_objects_v2(Bucket=bucket), 403, "AccessDenied")
    expect_error(lambda: anon.put_object(Bucket=bucket, Key=key, Body=b"overwritten"), 403, "AccessDenied")
    assert object_bytes(s3, bucket, key) == SECRET


def test_plain_http_get_without_auth(endpoint, secret_obj):
    bucket, key = secret_obj
    status, body = _fetch(f"{endpoint}/{bucket}/{key}")
    assert status == 403
    assert xml_error_code(body) == "AccessDenied"


@pytest.mark.hoard
def test_store_credentials_are_not_accepted_by_hoard(client_factory, e2e_env, secret_obj):
    """The cachelet has its own keys; the store's keys mean nothing to it."""
    bucket, key = secret_obj
    store_keyed = client_factory(creds=e2e_env.store_creds)
    expect_error(lambda: store_keyed.get_object(Bucket=bucket, Key=key), 403, "InvalidAccessKeyId")


@pytest.fixture
def sigv2_supported(target, store_kind):
    if target == "store" and store_kind == "versitygw":
        pytest.skip("versitygw does not implement SigV2")


@pytest.mark.parametrize("sigver", ["s3", "s3v4"])
def test_presigned_get(client_factory, secret_obj, sigver, request):
    if sigver == "s3":
        request.getfixturevalue("sigv2_supported")
    bucket, key = secret_obj
    url = client_factory(signature_version=sigver).generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300
    )
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    if sigver == "s3":
        assert "Signature" in query
        assert "AWSAccessKeyId" in query
    else:
        assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    status, body = _fetch(url)
    assert status == 200, body
    assert body == SECRET
    # The same URL keeps working (e.g. from a cache).
    assert _fetch(url) == (200, SECRET)


def test_presigned_default_signature(s3, secret_obj):
    bucket, key = secret_obj
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=60)
    assert _fetch(url) == (200, SECRET)


@pytest.mark.parametrize("sigver", ["s3", "s3v4"])
def test_presigned_put(client_factory, s3, bucket, sigver, request):
    if sigver == "s3":
        request.getfixturevalue("sigv2_supported")
    url = client_factory(signature_version=sigver).generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": "uploaded.txt"}, ExpiresIn=300
    )
    status, body = _fetch(url, method="PUT", data=b"uploaded via presigned URL")
    assert status == 200, body
    assert object_bytes(s3, bucket, "uploaded.txt") == b"uploaded via presigned URL"


def test_presigned_expired(client_factory, secret_obj, target, store_kind):
    bucket, key = secret_obj
    versions = ["s3v4"] if (target == "store" and store_kind == "versitygw") else ["s3", "s3v4"]
    urls = {
        v: client_factory(signature_version=v).generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=1
        )
        for v in versions
    }
    time.sleep(2.2)
    for v, url in urls.items():
        status, body = _fetch(url)
        assert status == 403, (v, body)
        assert xml_error_code(body) == "AccessDenied", (v, body)
        assert SECRET not in body


@pytest.mark.parametrize("sigver", ["s3", "s3v4"])
@pytest.mark.parametrize("how", ["key", "signature", "expiry"])
def test_presigned_tampered(client_factory, s3, secret_obj, sigver, how, request):
    if sigver == "s3":
        request.getfixturevalue("sigv2_supported")
    bucket, key = secret_obj
    s3.put_object(Bucket=bucket, Key="other.txt", Body=b"other contents")
    url = client_factory(signature_version=sigver).generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300
    )
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query)
    path = parts.path
    if how == "key":
        path = path.replace("secret.txt", "other.txt")
    elif how == "signature":
        name = "Signature" if sigver == "s3" else "X-Amz-Signature"
        query = [(k, (v[:-2] + ("AA" if v[-2:] != "AA" else "BB")) if k == name else v) for k, v in query]
    else:
        name = "Expires" if sigver == "s3" else "X-Amz-Expires"
        query = [(k, str(int(v) + 1000) if k == name else v) for k, v in query]
    tampered = urllib.parse.urlunsplit(parts._replace(path=path, query=urllib.parse.urlencode(query)))
    assert tampered != url
    status, body = _fetch(tampered)
    assert status == 403, body
    assert xml_error_code(body) in ("SignatureDoesNotMatch", "AccessDenied")
    assert b"contents" not in body


def test_sigv2_header_auth(client_factory, bucket, sigv2_supported):
    v2 = client_factory(signature_version="s3")
    v2.put_object(Bucket=bucket, Key="v2.txt", Body=b"signed with v2", Metadata={"m": "1"})
    got = v2.get_object(Bucket=bucket, Key="v2.txt")
    assert got["Body"].read() == b"signed with v2"
    assert got["Metadata"] == {"m": "1"}
    assert v2.get_object(Bucket=bucket, Key="v2.txt", Range="bytes=7-8")["Body"].read() == b"wi"
    v2.delete_object(Bucket=bucket, Key="v2.txt")
    expect_error(lambda: v2.get_object(Bucket=bucket, Key="v2.txt"), 404, "NoSuchKey")


@pytest.mark.hoard
def test_sigv2_bucket_level_requests(client_factory, bucket):
    """MinIO rejects SigV2 on path-style bucket URLs without a trailing slash
    ("/bucket"), so this is checked against the cachelet only."""
    v2 = client_factory(signature_version="s3")
    v2.put_object(Bucket=bucket, Key="v2.txt", Body=b"x")
    assert [o["Key"] for o in v2.list_objects(Bucket=bucket)["Contents"]] == ["v2.txt"]
    assert [o["Key"] for o in v2.list_objects_v2(Bucket=bucket)["Contents"]] == ["v2.txt"]
    assert bucket in [b["Name"] for b in v2.list_buckets()["Buckets"]]
    assert v2.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_sigv2_wrong_secret(client_factory, creds, secret_obj, sigv2_supported):
    bucket, key = secret_obj
    bad = client_factory(creds=Creds(creds.access_key, "not-the-secret"), signature_version="s3")
    expect_error(lambda: bad.get_object(Bucket=bucket, Key=key), 403, "SignatureDoesNotMatch")
