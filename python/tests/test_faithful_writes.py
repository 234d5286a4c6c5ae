"""Writes answered as the store answers them: each case runs on the target
and directly on the store, and the two must agree."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from s3util import client_error, list_keys, signed_request


def _outcome(fn) -> tuple[int, str]:
    try:
        fn()
    except ClientError as exc:
        return client_error(exc)
    return 200, ""


@pytest.mark.parametrize(
    "cond",
    [{"IfMatch": '"0123456789abcdef0123456789abcdef"'}, {"IfNoneMatch": "*"}],
    ids=["if-match-other", "if-none-match-star"],
)
def test_conditional_put_refused_as_by_the_store(s3, store_s3, bucket, cond):
    for client, key in ((store_s3, "direct"), (s3, "through")):
        client.put_object(Bucket=bucket, Key=key, Body=b"v1")
    s3.get_object(Bucket=bucket, Key="through")["Body"].read()  # cached
    want = _outcome(lambda: store_s3.put_object(Bucket=bucket, Key="direct", Body=b"v2", **cond))
    got = _outcome(lambda: s3.put_object(Bucket=bucket, Key="through", Body=b"v2", **cond))
    assert want == (412, "PreconditionFailed")
    assert got == want
    assert s3.get_object(Bucket=bucket, Key="through")["Body"].read() == b"v1"
    assert store_s3.get_object(Bucket=bucket, Key="through")["Body"].read() == b"v1"


def test_conditional_put_on_missing_key_as_by_the_store(s3, store_s3, bucket):
    cond = {"IfMatch": '"0123456789abcdef0123456789abcdef"'}
    want = _outcome(lambda: store_s3.put_object(Bucket=bucket, Key="direct", Body=b"v", **cond))
    got = _outcome(lambda: s3.put_object(Bucket=bucket, Key="through", Body=b"v", **cond))
    assert got == want


def test_conditional_put_matching(s3, bucket):
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"v1")["ETag"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"v2", IfMatch=etag)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"


def test_default_content_type_as_by_the_store(s3, store_s3, bucket):
    store_s3.put_object(Bucket=bucket, Key="direct", Body=b"x")
    s3.put_object(Bucket=bucket, Key="through", Body=b"x")
    want = store_s3.head_object(Bucket=bucket, Key="direct")["ContentType"]
    assert store_s3.head_object(Bucket=bucket, Key="through")["ContentType"] == want
    assert s3.head_object(Bucket=bucket, Key="through")["ContentType"] == want
    assert s3.get_object(Bucket=bucket, Key="through")["ContentType"] == want


def test_head_response_overrides_as_by_the_store(s3, store_s3, bucket, store_kind):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", ContentType="text/plain")
    kwargs = dict(Bucket=bucket, Key="k", ResponseContentType="image/png", ResponseContentDisposition="attachment")
    want = store_s3.head_object(**kwargs)
    got = s3.head_object(**kwargs)
    if store_kind == "minio":
        assert want["ContentType"] == "image/png"
    for field in ("ContentType", "ContentDisposition"):
        assert got.get(field) == want.get(field), field


def test_double_slash_key_as_by_the_store(s3, store_s3, bucket, e2e_env, store_kind):
    if store_kind != "minio":
        pytest.skip("measured against MinIO, which takes /bucket//k for the key k")
    store = signed_request(e2e_env.store_endpoint, e2e_env.store_creds, "PUT", f"/{bucket}//direct", body=b"v1")
    through = signed_request(e2e_env.endpoint, e2e_env.creds, "PUT", f"/{bucket}//through", body=b"v1")
    assert (through.status, store.status) == (200, 200)
    assert sorted(list_keys(store_s3, bucket)) == ["direct", "through"]
    got = signed_request(e2e_env.endpoint, e2e_env.creds, "GET", f"/{bucket}//through")
    assert got.body == b"v1"  # now cached under "through"
    s3.put_object(Bucket=bucket, Key="through", Body=b"v2")
    got = signed_request(e2e_env.endpoint, e2e_env.creds, "GET", f"/{bucket}//through")
    assert got.body == b"v2"
