"""ListObjectsV2 / ListObjects (V1), and keys with awkward characters."""

from __future__ import annotations

import pytest

from s3util import expect_error, list_keys

KEYS = sorted(
    [
        "a.txt",
        "b.txt",
        "dir1/x.txt",
        "dir1/y.txt",
        "dir1/sub/z.txt",
        "dir2/w.txt",
        "e.txt",
    ]
)


@pytest.fixture
def populated(s3, bucket):
    for k in KEYS:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    return bucket


def test_list_v2_all(s3, populated):
    resp = s3.list_objects_v2(Bucket=populated)
    assert [o["Key"] for o in resp["Contents"]] == KEYS
    assert resp["KeyCount"] == len(KEYS)
    assert resp["IsTruncated"] is False
    sizes = {o["Key"]: o["Size"] for o in resp["Contents"]}
    assert sizes == {k: len(k) for k in KEYS}


def test_list_v2_prefix(s3, populated):
    resp = s3.list_objects_v2(Bucket=populated, Prefix="dir1/")
    assert [o["Key"] for o in resp["Contents"]] == ["dir1/sub/z.txt", "dir1/x.txt", "dir1/y.txt"]
    assert resp["Prefix"] == "dir1/"


def test_list_v2_prefix_no_match(s3, populated):
    resp = s3.list_objects_v2(Bucket=populated, Prefix="nothing-here/")
    assert resp["KeyCount"] == 0
    assert "Contents" not in resp


def test_list_v2_delimiter(s3, populated):
    resp = s3.list_objects_v2(Bucket=populated, Delimiter="/")
    assert [o["Key"] for o in resp["Contents"]] == ["a.txt", "b.txt", "e.txt"]
    assert [p["Prefix"] for p in resp["CommonPrefixes"]] == ["dir1/", "dir2/"]


def test_list_v2_prefix_and_delimiter(s3, populated):
    resp = s3.list_objects_v2(Bucket=populated, Prefix="dir1/", Delimiter="/")
    assert [o["Key"] for o in resp["Contents"]] == ["dir1/x.txt", "dir1/y.txt"]
    assert [p["Prefix"] for p in resp["CommonPrefixes"]] == ["dir1/sub/"]


def test_list_v2_pagination(s3, populated):
    seen = []
    token = None
    pages = 0
    while True:
        kwargs = {"Bucket": populated, "MaxKeys": 2}
        if token:
            kwargs["ContinuationToken"] = token
        resp = s3.list_objects_v2(**kwargs)
        pages += 1
        page_keys = [o["Key"] for o in resp.get("Contents", [])]
        assert len(page_keys) <= 2
        assert resp["MaxKeys"] == 2
        seen.extend(page_keys)
        if not resp["IsTruncated"]:
            break
        token = resp["NextContinuationToken"]
        assert token
        assert pages < 20, "pagination does not terminate"
    assert seen == KEYS
    assert pages == 4


def test_list_v2_start_after(s3, populated):
    resp = s3.list_objects_v2(Bucket=populated, StartAfter="dir1/y.txt")
    assert [o["Key"] for o in resp["Contents"]] == ["dir2/w.txt", "e.txt"]
    assert resp["StartAfter"] == "dir1/y.txt"


def test_list_v1_marker_pagination(s3, populated):
    resp = s3.list_objects(Bucket=populated, MaxKeys=3)
    assert [o["Key"] for o in resp["Contents"]] == KEYS[:3]
    assert resp["IsTruncated"] is True
    resp2 = s3.list_objects(Bucket=populated, Marker=KEYS[2])
    assert [o["Key"] for o in resp2["Contents"]] == KEYS[3:]
    assert resp2["IsTruncated"] is False
    assert resp2["Marker"] == KEYS[2]


def test_list_v1_delimiter(s3, populated):
    resp = s3.list_objects(Bucket=populated, Delimiter="/", Prefix="dir")
    assert "Contents" not in resp
    assert [p["Prefix"] for p in resp["CommonPrefixes"]] == ["dir1/", "dir2/"]


def test_list_missing_bucket(s3):
    expect_error(lambda: s3.list_objects_v2(Bucket="e2e-no-such-bucket-x2"), 404, "NoSuchBucket")


def test_list_sees_new_and_deleted_objects(s3, populated):
    assert "new.txt" not in list_keys(s3, populated)
    s3.put_object(Bucket=populated, Key="new.txt", Body=b"n")
    assert "new.txt" in list_keys(s3, populated)
    s3.delete_object(Bucket=populated, Key="a.txt")
    assert "a.txt" not in list_keys(s3, populated)


ODD_KEYS = [
    "unicode/caf\u00e9-\u65e5\u672c\u8a9e-\U0001f600.txt",
    "spaces/with some  spaces .txt",
    "plus/a+b+c.txt",
    "percent/100%25 and 50%.txt",
    "equals/k=v&x=y.txt",
    "amp/rock&roll.txt",
    "deep/a/b/c/d/e/f.txt",
    "misc/!$'()*,;:@[]{}~^`|.txt",
    "quote/\"double\" 'single'.txt",
    "hash/#frag?query.txt",
]


@pytest.mark.parametrize("key", ODD_KEYS, ids=[f"k{i}" for i in range(len(ODD_KEYS))])
def test_odd_key_round_trip(s3, bucket, key):
    body = ("content of " + key).encode()
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(body)
    assert list_keys(s3, bucket) == [key]
    prefix = key.split("/")[0] + "/"
    resp = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, Delimiter="/")
    if key.count("/") == 1:
        assert [o["Key"] for o in resp["Contents"]] == [key]
    else:
        assert [p["Prefix"] for p in resp["CommonPrefixes"]] == [key[: key.index("/", len(prefix)) + 1]]
    s3.copy_object(Bucket=bucket, Key=key + ".copy", CopySource={"Bucket": bucket, "Key": key})
    assert s3.get_object(Bucket=bucket, Key=key + ".copy")["Body"].read() == body
    s3.delete_object(Bucket=bucket, Key=key)
    assert list_keys(s3, bucket) == [key + ".copy"]


def test_odd_keys_list_together(s3, bucket):
    for k in ODD_KEYS:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    assert list_keys(s3, bucket) == sorted(ODD_KEYS, key=lambda k: k.encode())
    # botocore asks for EncodingType=url on both listings and decodes the keys.
    resp = s3.list_objects(Bucket=bucket)
    assert sorted(o["Key"] for o in resp["Contents"]) == sorted(ODD_KEYS)
    resp = s3.list_objects_v2(Bucket=bucket, Prefix="deep/a/b/c/", Delimiter="/")
    assert [p["Prefix"] for p in resp["CommonPrefixes"]] == ["deep/a/b/c/d/"]
    deleted = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in ODD_KEYS]})
    assert sorted(d["Key"] for d in deleted["Deleted"]) == sorted(ODD_KEYS)
    assert list_keys(s3, bucket) == []
