"""Multipart uploads, and boto3's managed (concurrent, multipart) transfers."""

from __future__ import annotations

import hashlib
import io

import pytest
from boto3.s3.transfer import TransferConfig

from s3util import MiB, expect_error, object_bytes, random_bytes

PART = 5 * MiB  # the S3 minimum for every part but the last


def _multipart_etag(parts: list[bytes]) -> str:
    digests = b"".join(hashlib.md5(p).digest() for p in parts)
    return f"{hashlib.md5(digests).hexdigest()}-{len(parts)}"


def test_multipart_upload_complete(s3, store_s3, bucket):
    # ListMultipartUploads is checked on the store: the cachelet need not serve it.
    parts = [random_bytes(PART), random_bytes(PART), random_bytes(1234)]
    create = s3.create_multipart_upload(
        Bucket=bucket, Key="mp", ContentType="application/x-mp", Metadata={"kind": "multipart"}
    )
    upload_id = create["UploadId"]
    assert upload_id

    uploads = store_s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("mp", upload_id)]

    etags = []
    for n, data in enumerate(parts, start=1):
        resp = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=n, Body=data)
        assert resp["ETag"].strip('"') == hashlib.md5(data).hexdigest()
        etags.append(resp["ETag"])

    listed = s3.list_parts(Bucket=bucket, Key="mp", UploadId=upload_id)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2, 3]
    assert [p["Size"] for p in listed["Parts"]] == [len(p) for p in parts]
    assert [p["ETag"] for p in listed["Parts"]] == etags

    # Not visible before completion.
    assert object_bytes(s3, bucket, "mp") is None

    done = s3.complete_multipart_upload(
        Bucket=bucket,
        Key="mp",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]},
    )
    assert done["ETag"].strip('"') == _multipart_etag(parts)

    whole = b"".join(parts)
    got = s3.get_object(Bucket=bucket, Key="mp")
    assert got["ContentLength"] == len(whole)
    assert got["ContentType"] == "application/x-mp"
    assert got["Metadata"] == {"kind": "multipart"}
    assert got["Body"].read() == whole
    # A range spanning the part 1/part 2 boundary.
    rng = s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={PART - 10}-{PART + 9}")["Body"].read()
    assert rng == whole[PART - 10 : PART + 10]
    assert store_s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_multipart_upload_part_overwrite(s3, bucket):
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=1, Body=b"first attempt")
    resp = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=1, Body=b"second attempt")
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="mp",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": resp["ETag"]}]},
    )
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"second attempt"


def test_multipart_abort(s3, store_s3, bucket, store_kind):
    s3.put_object(Bucket=bucket, Key="mp", Body=b"previous version")
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=1, Body=random_bytes(PART))
    resp = s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload_id)
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert store_s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    expect_error(lambda: s3.list_parts(Bucket=bucket, Key="mp", UploadId=upload_id), 404, "NoSuchUpload")
    expect_error(
        lambda: s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=2, Body=b"late"),
        404,
        "NoSuchUpload",
    )
    if store_kind != "versitygw":
        # versitygw answers 200 to CompleteMultipartUpload of an unknown upload
        # when the key exists (it treats it as a retried completion), without
        # changing the object.
        expect_error(
            lambda: s3.complete_multipart_upload(
                Bucket=bucket,
                Key="mp",
                UploadId=upload_id,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]},
            ),
            404,
            "NoSuchUpload",
        )
    assert object_bytes(s3, bucket, "mp") == b"previous version"


def test_multipart_complete_with_wrong_etag(s3, bucket):
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=1, Body=b"data")
    expect_error(
        lambda: s3.complete_multipart_upload(
            Bucket=bucket,
            Key="mp",
            UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"0123456789abcdef0123456789abcdef"'}]},
        ),
        400,
        "InvalidPart",
    )
    assert object_bytes(s3, bucket, "mp") is None
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload_id)


TRANSFER = TransferConfig(
    multipart_threshold=8 * MiB,
    multipart_chunksize=8 * MiB,
    max_concurrency=4,
    use_threads=True,
)


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    data = random_bytes(40 * MiB)
    path = tmp_path_factory.mktemp("transfer") / "big.bin"
    path.write_bytes(data)
    return path, data


def test_upload_file_download_file_multipart(s3, bucket, big_file, tmp_path):
    path, data = big_file
    s3.upload_file(str(path), bucket, "big.bin", Config=TRANSFER)
    head = s3.head_object(Bucket=bucket, Key="big.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].strip('"').endswith("-5"), "40 MiB in 8 MiB chunks is a 5-part upload"
    out = tmp_path / "down.bin"
    s3.download_file(bucket, "big.bin", str(out), Config=TRANSFER)
    assert out.stat().st_size == len(data)
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(data).digest()


def test_download_fileobj_concurrent_ranges(s3, store_s3, bucket, big_file):
    path, data = big_file
    # Written directly to the store: the cachelet has never seen it.
    store_s3.upload_file(str(path), bucket, "big.bin", Config=TRANSFER)
    for _ in range(2):  # cold, then (for hoard) warm
        buf = io.BytesIO()
        s3.download_fileobj(bucket, "big.bin", buf, Config=TRANSFER)
        assert hashlib.sha256(buf.getvalue()).digest() == hashlib.sha256(data).digest()


def test_upload_fileobj_unknown_length(s3, bucket):
    data = random_bytes(18 * MiB)

    class Stream(io.RawIOBase):
        """A non-seekable stream, so boto3 cannot know the size up front."""

        def __init__(self):
            self._buf = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, b):
            chunk = self._buf.read(len(b))
            b[: len(chunk)] = chunk
            return len(chunk)

    s3.upload_fileobj(Stream(), bucket, "stream.bin", Config=TRANSFER)
    assert s3.get_object(Bucket=bucket, Key="stream.bin")["Body"].read() == data
