"""Object operations: Get (ranges, conditionals), Head, Put, Delete, Copy."""

from __future__ import annotations

import datetime as dt
import hashlib
import time

import pytest

from s3util import MiB, client_error, expect_error, object_bytes, random_bytes

DATA = bytes(range(256)) * 4  # 1 KiB, every byte value, position-dependent


@pytest.fixture
def obj(s3, bucket):
    s3.put_object(Bucket=bucket, Key="obj", Body=DATA)
    return bucket, "obj"


def test_get_whole_object(s3, obj):
    bucket, key = obj
    resp = s3.get_object(Bucket=bucket, Key=key)
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert resp["Body"].read() == DATA
    assert resp["ContentLength"] == len(DATA)
    assert resp["ETag"].strip('"') == hashlib.md5(DATA).hexdigest()


@pytest.mark.parametrize(
    ("rng", "start", "end"),
    [
        ("bytes=0-9", 0, 9),
        ("bytes=-5", len(DATA) - 5, len(DATA) - 1),
        ("bytes=10-", 10, len(DATA) - 1),
        ("bytes=100-199", 100, 199),
        ("bytes=1000-5000", 1000, len(DATA) - 1),  # end clamped to the size
    ],
)
def test_get_range(s3, obj, rng, start, end):
    bucket, key = obj
    resp = s3.get_object(Bucket=bucket, Key=key, Range=rng)
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 206
    body = resp["Body"].read()
    assert body == DATA[start : end + 1]
    assert resp["ContentLength"] == end - start + 1
    assert resp["ContentRange"] == f"bytes {start}-{end}/{len(DATA)}"


def test_get_range_unsatisfiable(s3, obj):
    bucket, key = obj
    expect_error(lambda: s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={len(DATA)}-"), 416, "InvalidRange")


def test_get_range_on_empty_object_is_unsatisfiable(s3, bucket):
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    expect_error(lambda: s3.get_object(Bucket=bucket, Key="empty", Range="bytes=0-0"), 416, "InvalidRange")


def test_get_missing_key(s3, bucket):
    expect_error(lambda: s3.get_object(Bucket=bucket, Key="nope"), 404, "NoSuchKey")


def test_get_missing_bucket(s3):
    expect_error(lambda: s3.get_object(Bucket="e2e-no-such-bucket-x1", Key="k"), 404, "NoSuchBucket")


def test_conditional_if_match(s3, obj):
    bucket, key = obj
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    assert s3.get_object(Bucket=bucket, Key=key, IfMatch=etag)["Body"].read() == DATA
    expect_error(
        lambda: s3.get_object(Bucket=bucket, Key=key, IfMatch='"0123456789abcdef0123456789abcdef"'),
        412,
        "PreconditionFailed",
    )


def test_conditional_if_none_match(s3, obj):
    bucket, key = obj
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    with pytest.raises(Exception) as excinfo:
        s3.get_object(Bucket=bucket, Key=key, IfNoneMatch=etag)
    status, _ = client_error(excinfo)
    assert status == 304
    other = '"0123456789abcdef0123456789abcdef"'
    assert s3.get_object(Bucket=bucket, Key=key, IfNoneMatch=other)["Body"].read() == DATA


def test_conditional_modified_since(s3, obj):
    bucket, key = obj
    last_modified = s3.head_object(Bucket=bucket, Key=key)["LastModified"]
    past = last_modified - dt.timedelta(days=1)
    assert s3.get_object(Bucket=bucket, Key=key, IfModifiedSince=past)["Body"].read() == DATA
    # Not modified since a second after its Last-Modified (which is truncated
    # to the second; versitygw compares with sub-second precision). The date
    # must not be in the future: RFC 9110 servers ignore such a header.
    since = last_modified + dt.timedelta(seconds=1)
    wait = (since - dt.datetime.now(dt.timezone.utc)).total_seconds() + 0.05
    if wait > 0:
        time.sleep(wait)
    with pytest.raises(Exception) as excinfo:
        s3.get_object(Bucket=bucket, Key=key, IfModifiedSince=since)
    assert client_error(excinfo)[0] == 304


def test_conditional_unmodified_since(s3, obj):
    bucket, key = obj
    last_modified = s3.head_object(Bucket=bucket, Key=key)["LastModified"]
    past = last_modified - dt.timedelta(days=1)
    future = last_modified + dt.timedelta(days=1)
    assert s3.get_object(Bucket=bucket, Key=key, IfUnmodifiedSince=future)["Body"].read() == DATA
    expect_error(
        lambda: s3.get_object(Bucket=bucket, Key=key, IfUnmodifiedSince=past),
        412,
        "PreconditionFailed",
    )


def test_conditional_range_with_if_match(s3, obj):
    bucket, key = obj
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    resp = s3.get_object(Bucket=bucket, Key=key, Range="bytes=5-9", IfMatch=etag)
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert resp["Body"].read() == DATA[5:10]


def test_head_object(s3, bucket):
    s3.put_object(
        Bucket=bucket,
        Key="h",
        Body=DATA,
        ContentType="application/x-hoard-test",
        Metadata={"colour": "blue"},
    )
    resp = s3.head_object(Bucket=bucket, Key="h")
    assert resp["ContentLength"] == len(DATA)
    assert resp["ContentType"] == "application/x-hoard-test"
    assert resp["Metadata"] == {"colour": "blue"}
    assert resp["ETag"].strip('"') == hashlib.md5(DATA).hexdigest()
    assert resp["LastModified"] is not None


def test_head_missing_object(s3, bucket):
    # HEAD responses have no body: botocore reports the bare status as the code.
    expect_error(lambda: s3.head_object(Bucket=bucket, Key="missing"), 404, "404", "NoSuchKey")


def test_put_metadata_and_content_type_round_trip(s3, bucket):
    s3.put_object(
        Bucket=bucket,
        Key="m",
        Body=b"hello",
        ContentType="text/plain; charset=utf-8",
        ContentDisposition='attachment; filename="x.txt"',
        CacheControl="max-age=60",
        Metadata={"alpha": "1", "with-dash": "two words"},
    )
    resp = s3.get_object(Bucket=bucket, Key="m")
    assert resp["Body"].read() == b"hello"
    assert resp["ContentType"] == "text/plain; charset=utf-8"
    assert resp["ContentDisposition"] == 'attachment; filename="x.txt"'
    assert resp["CacheControl"] == "max-age=60"
    assert resp["Metadata"] == {"alpha": "1", "with-dash": "two words"}


def test_put_empty_object(s3, bucket):
    resp = s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert resp["ETag"].strip('"') == hashlib.md5(b"").hexdigest()
    got = s3.get_object(Bucket=bucket, Key="empty")
    assert got["ContentLength"] == 0
    assert got["Body"].read() == b""
    assert s3.head_object(Bucket=bucket, Key="empty")["ContentLength"] == 0


def test_put_large_object(s3, bucket):
    data = random_bytes(20 * MiB)
    resp = s3.put_object(Bucket=bucket, Key="big", Body=data)
    assert resp["ETag"].strip('"') == hashlib.md5(data).hexdigest()
    got = s3.get_object(Bucket=bucket, Key="big")
    assert got["ContentLength"] == len(data)
    assert got["Body"].read() == data
    # A range deep inside the object is served correctly too.
    off = 13 * MiB + 7
    part = s3.get_object(Bucket=bucket, Key="big", Range=f"bytes={off}-{off + 99}")["Body"].read()
    assert part == data[off : off + 100]


def test_put_overwrite_is_visible(s3, bucket):
    s3.put_object(Bucket=bucket, Key="o", Body=b"first")
    assert s3.get_object(Bucket=bucket, Key="o")["Body"].read() == b"first"
    s3.put_object(Bucket=bucket, Key="o", Body=b"second version")
    assert s3.get_object(Bucket=bucket, Key="o")["Body"].read() == b"second version"
    assert s3.head_object(Bucket=bucket, Key="o")["ContentLength"] == len(b"second version")


def test_delete_object(s3, obj):
    bucket, key = obj
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == DATA  # maybe cached now
    resp = s3.delete_object(Bucket=bucket, Key=key)
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 204
    expect_error(lambda: s3.get_object(Bucket=bucket, Key=key), 404, "NoSuchKey")
    expect_error(lambda: s3.head_object(Bucket=bucket, Key=key), 404, "404", "NoSuchKey")
    # Deleting a missing key is not an error in S3.
    assert s3.delete_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPStatusCode"] == 204


def _put_many(s3, bucket, keys):
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())


def test_delete_objects_verbose(s3, bucket):
    keys = ["d/1", "d/2", "d/3", "keep"]
    _put_many(s3, bucket, keys)
    for k in keys:  # warm any cache
        s3.get_object(Bucket=bucket, Key=k)["Body"].read()
    resp = s3.delete_objects(
        Bucket=bucket,
        Delete={"Objects": [{"Key": "d/1"}, {"Key": "d/2"}, {"Key": "d/3"}, {"Key": "never-existed"}]},
    )
    deleted = sorted(d["Key"] for d in resp.get("Deleted", []))
    assert deleted == ["d/1", "d/2", "d/3", "never-existed"]
    assert resp.get("Errors", []) == []
    for k in ["d/1", "d/2", "d/3"]:
        assert object_bytes(s3, bucket, k) is None
    assert object_bytes(s3, bucket, "keep") == b"keep"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])] == ["keep"]


def test_delete_objects_quiet(s3, bucket, store_kind):
    keys = [f"q/{i}" for i in range(5)]
    _put_many(s3, bucket, keys)
    resp = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
    if store_kind != "versitygw":  # versitygw lists the deleted keys even in quiet mode
        assert resp.get("Deleted", []) == []
    assert resp.get("Errors", []) == []
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    for k in keys:
        assert object_bytes(s3, bucket, k) is None


def test_copy_object_copy_directive(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=DATA, ContentType="image/png", Metadata={"origin": "src"})
    s3.get_object(Bucket=bucket, Key="src")["Body"].read()
    resp = s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert resp["CopyObjectResult"]["ETag"].strip('"') == hashlib.md5(DATA).hexdigest()
    got = s3.get_object(Bucket=bucket, Key="dst")
    assert got["Body"].read() == DATA
    assert got["ContentType"] == "image/png"
    assert got["Metadata"] == {"origin": "src"}
    assert s3.get_object(Bucket=bucket, Key="src")["Body"].read() == DATA


def test_copy_object_replace_directive(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=DATA, ContentType="image/png", Metadata={"origin": "src"})
    s3.copy_object(
        Bucket=bucket,
        Key="dst",
        CopySource={"Bucket": bucket, "Key": "src"},
        MetadataDirective="REPLACE",
        ContentType="text/csv",
        Metadata={"origin": "replaced", "extra": "yes"},
    )
    got = s3.get_object(Bucket=bucket, Key="dst")
    assert got["Body"].read() == DATA
    assert got["ContentType"] == "text/csv"
    assert got["Metadata"] == {"origin": "replaced", "extra": "yes"}


def test_copy_object_in_place_replace_updates_metadata(s3, bucket):
    s3.put_object(Bucket=bucket, Key="self", Body=DATA, Metadata={"v": "1"})
    assert s3.head_object(Bucket=bucket, Key="self")["Metadata"] == {"v": "1"}
    s3.copy_object(
        Bucket=bucket,
        Key="self",
        CopySource={"Bucket": bucket, "Key": "self"},
        MetadataDirective="REPLACE",
        Metadata={"v": "2"},
    )
    got = s3.get_object(Bucket=bucket, Key="self")
    assert got["Metadata"] == {"v": "2"}
    assert got["Body"].read() == DATA


def test_copy_overwrites_cached_destination(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"new contents")
    s3.put_object(Bucket=bucket, Key="dst", Body=b"old")
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"old"
    s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"new contents"


def test_copy_missing_source(s3, bucket):
    expect_error(
        lambda: s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "missing"}),
        404,
        "NoSuchKey",
    )
    assert object_bytes(s3, bucket, "dst") is None
