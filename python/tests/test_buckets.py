"""Bucket operations: ListBuckets, CreateBucket, HeadBucket, DeleteBucket."""

from __future__ import annotations

from s3util import expect_error


def test_create_head_list_delete_bucket(s3, bucket_name):
    expect_error(lambda: s3.head_bucket(Bucket=bucket_name), 404, "404", "NoSuchBucket")
    resp = s3.create_bucket(Bucket=bucket_name)
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert s3.head_bucket(Bucket=bucket_name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert bucket_name in names
    assert s3.list_objects_v2(Bucket=bucket_name)["KeyCount"] == 0
    assert s3.delete_bucket(Bucket=bucket_name)["ResponseMetadata"]["HTTPStatusCode"] == 204
    expect_error(lambda: s3.head_bucket(Bucket=bucket_name), 404, "404", "NoSuchBucket")
    assert bucket_name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_list_buckets_shows_creation_date(s3, bucket):
    buckets = {b["Name"]: b for b in s3.list_buckets()["Buckets"]}
    assert bucket in buckets
    assert buckets[bucket]["CreationDate"] is not None


def test_create_existing_bucket(s3, bucket):
    expect_error(lambda: s3.create_bucket(Bucket=bucket), 409, "BucketAlreadyOwnedByYou", "BucketAlreadyExists")
    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_delete_non_empty_bucket(s3, bucket):
    s3.put_object(Bucket=bucket, Key="keep/me", Body=b"precious")
    expect_error(lambda: s3.delete_bucket(Bucket=bucket), 409, "BucketNotEmpty")
    assert s3.get_object(Bucket=bucket, Key="keep/me")["Body"].read() == b"precious"
    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_delete_missing_bucket(s3, bucket_name):
    expect_error(lambda: s3.delete_bucket(Bucket=bucket_name), 404, "NoSuchBucket")


def test_object_ops_after_bucket_recreated(s3, bucket_name):
    s3.create_bucket(Bucket=bucket_name)
    s3.put_object(Bucket=bucket_name, Key="k", Body=b"generation one")
    assert s3.get_object(Bucket=bucket_name, Key="k")["Body"].read() == b"generation one"
    s3.delete_object(Bucket=bucket_name, Key="k")
    s3.delete_bucket(Bucket=bucket_name)
    s3.create_bucket(Bucket=bucket_name)
    expect_error(lambda: s3.get_object(Bucket=bucket_name, Key="k"), 404, "NoSuchKey")
    s3.put_object(Bucket=bucket_name, Key="k", Body=b"generation two")
    assert s3.get_object(Bucket=bucket_name, Key="k")["Body"].read() == b"generation two"
