"""Cachelet-only behaviour: consistency with the store, metrics, what the store answers."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO_ROOT, empty_bucket
from s3util import expect_error, random_bytes, signed_request, xml_error_code

pytestmark = pytest.mark.hoard

READS = "hoard_cachelet_reads_total"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def reads(samples, outcome: str) -> float:
    """Sum of hoard_cachelet_reads_total{outcome=...} over any other labels."""
    return sum(v for (name, labels), v in samples.items() if name == READS and ("outcome", outcome) in labels)


def scrape_after_read(url: str, outcome: str, above: float, timeout: float = 30.0):
    """Scrapes until reads(outcome) passes above, or timeout seconds pass.

    A read is counted when the cachelet closes its body, which may be just
    after the client has the last byte: a scrape at once can miss it.
    """
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(url)
        if reads(samples, outcome) > above or time.monotonic() > deadline:
            return samples
        time.sleep(0.02)


def test_metrics_endpoint_serves_prometheus_text(metrics_url):
    samples = scrape(metrics_url)
    assert samples, "no metrics at all"
    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        assert resp.headers.get("Content-Type", "").startswith("text/plain")


def test_metrics_count_miss_then_hit(s3, store_s3, bucket, metrics_url):
    data = random_bytes(64 * 1024)
    # Written behind the cachelet's back, so it has never seen the object.
    store_s3.put_object(Bucket=bucket, Key="m", Body=data)

    before = scrape(metrics_url)
    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == data
    after_miss = scrape_after_read(metrics_url, "local_miss", reads(before, "local_miss"))
    assert reads(after_miss, "local_miss") > reads(before, "local_miss"), "first GET must count a local_miss"
    assert reads(after_miss, "local_hit") == reads(before, "local_hit"), "first GET must not count a local_hit"

    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == data
    after_hit = scrape_after_read(metrics_url, "local_hit", reads(after_miss, "local_hit"))
    assert reads(after_hit, "local_hit") > reads(after_miss, "local_hit"), "second GET must count a local_hit"
    assert reads(after_hit, "local_miss") == reads(after_miss, "local_miss"), "second GET must not miss"

    # A ranged GET of a cached object is a hit too.
    assert s3.get_object(Bucket=bucket, Key="m", Range="bytes=100-199")["Body"].read() == data[100:200]
    ranged = scrape_after_read(metrics_url, "local_hit", reads(after_hit, "local_hit"))
    assert reads(ranged, "local_hit") > reads(after_hit, "local_hit")


def test_overwrite_in_store_is_seen(s3, store_s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"version one")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"version one"  # fills the cache
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"version one"

    store_s3.put_object(Bucket=bucket, Key="k", Body=b"version two, longer", ContentType="text/x-two")
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["Body"].read() == b"version two, longer"
    assert got["ContentLength"] == len(b"version two, longer")
    assert got["ContentType"] == "text/x-two"
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["ContentLength"] == len(b"version two, longer")
    assert head["ETag"] == store_s3.head_object(Bucket=bucket, Key="k")["ETag"]
    rng = s3.get_object(Bucket=bucket, Key="k", Range="bytes=0-6")["Body"].read()
    assert rng == b"version"


def test_same_size_overwrite_in_store_is_seen(s3, store_s3, bucket):
    """Same length, different bytes: only the ETag tells them apart."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"AAAAAAAA")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"AAAAAAAA"
    store_s3.put_object(Bucket=bucket, Key="k", Body=b"BBBBBBBB")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"BBBBBBBB"
    assert s3.get_object(Bucket=bucket, Key="k", Range="bytes=2-3")["Body"].read() == b"BB"


def test_delete_in_store_is_seen(s3, store_s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"doomed")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"doomed"
    store_s3.delete_object(Bucket=bucket, Key="k")
    expect_error(lambda: s3.get_object(Bucket=bucket, Key="k"), 404, "NoSuchKey")
    expect_error(lambda: s3.head_object(Bucket=bucket, Key="k"), 404, "404", "NoSuchKey")
    expect_error(lambda: s3.get_object(Bucket=bucket, Key="k", Range="bytes=0-1"), 404, "NoSuchKey")


def test_recreate_in_store_after_delete_is_seen(s3, store_s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"first life")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first life"
    store_s3.delete_object(Bucket=bucket, Key="k")
    expect_error(lambda: s3.get_object(Bucket=bucket, Key="k"), 404, "NoSuchKey")
    store_s3.put_object(Bucket=bucket, Key="k", Body=b"second life")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"second life"


def test_writes_through_hoard_reach_the_store(s3, store_s3, bucket):
    data = random_bytes(3 * 1024 * 1024)
    s3.put_object(Bucket=bucket, Key="w", Body=data, Metadata={"via": "hoard"})
    got = store_s3.get_object(Bucket=bucket, Key="w")
    assert got["Body"].read() == data
    assert got["Metadata"] == {"via": "hoard"}
    s3.delete_object(Bucket=bucket, Key="w")
    expect_error(lambda: store_s3.head_object(Bucket=bucket, Key="w"), 404, "404", "NoSuchKey")


def test_conditional_get_after_store_overwrite(s3, store_s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"one")
    old_etag = s3.head_object(Bucket=bucket, Key="k")["ETag"]
    s3.get_object(Bucket=bucket, Key="k")["Body"].read()
    store_s3.put_object(Bucket=bucket, Key="k", Body=b"two")
    # The cached ETag is stale: If-None-Match on it must return the new bytes.
    got = s3.get_object(Bucket=bucket, Key="k", IfNoneMatch=old_etag)
    assert got["Body"].read() == b"two"
    expect_error(lambda: s3.get_object(Bucket=bucket, Key="k", IfMatch=old_etag), 412, "PreconditionFailed")


STORE_ANSWERS = [
    (
        "PUT",
        "lifecycle=",
        b"<LifecycleConfiguration><Rule><ID>r</ID><Status>Enabled</Status>"
        b"<Filter><Prefix></Prefix></Filter><Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>",
    ),
    ("GET", "torrent=", b""),
]


@pytest.mark.parametrize(("method", "query", "body"), STORE_ANSWERS, ids=["put-lifecycle", "get-torrent"])
def test_operation_outside_the_cache_answered_by_the_store(e2e_env, s3, store_s3, bucket, method, query, body):
    """What hoard does not answer from its cache, the store answers: the
    same raw request gets the same status and error code either way."""
    direct = bucket + "-direct"
    store_s3.create_bucket(Bucket=direct)
    try:
        answers = []
        for ep, cr, b in (
            (e2e_env.endpoint, e2e_env.creds, bucket),
            (e2e_env.store_endpoint, e2e_env.store_creds, direct),
        ):
            store_s3.put_object(Bucket=b, Key="obj", Body=b"x")
            path = f"/{b}" if "lifecycle" in query else f"/{b}/obj"
            headers = {}
            if body:
                headers["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
            resp = signed_request(ep, cr, method, path, query=query, headers=headers, body=body)
            answers.append((resp.status, xml_error_code(resp.body)))
        assert answers[0] == answers[1]
    finally:
        empty_bucket(store_s3, direct)
        store_s3.delete_bucket(Bucket=direct)


def test_unpacked_range_of_a_packed_object(s3, store_s3, bucket, metrics_url, tmp_path):
    """x-hoard-unpacked reads the bytes `hoard pack` packed, a range at the
    cost of its blocks; without the header a GET is the stored object."""
    data = (b"unpacked ranges " * 40000) + random_bytes(1 << 20)  # 640 KB of text, 1 MiB random
    src, packed = tmp_path / "model.bin", tmp_path / "model.blk"
    src.write_bytes(data)
    binary = os.environ.get("HOARD_BIN") or str(REPO_ROOT / "bin/hoard")
    subprocess.run([binary, "pack", "--block-size", "65536", str(src), str(packed)], check=True, capture_output=True)
    container = packed.read_bytes()
    store_s3.put_object(Bucket=bucket, Key="model.blk", Body=container)

    def unpacked(request, **_):
        request.headers["x-hoard-unpacked"] = "true"

    s3.meta.events.register("before-sign.s3.GetObject", unpacked)
    try:
        before = scrape(metrics_url)
        got = s3.get_object(Bucket=bucket, Key="model.blk", Range="bytes=700000-900000")
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"] == f"bytes 700000-900000/{len(data)}"
        assert got["Body"].read() == data[700000:900001]
        again = s3.get_object(Bucket=bucket, Key="model.blk", Range="bytes=700000-900000")
        assert again["Body"].read() == data[700000:900001]
        assert again["ResponseMetadata"]["HTTPHeaders"]["x-hoard-read"] == "local_hit"
        whole = s3.get_object(Bucket=bucket, Key="model.blk")
        assert whole["Body"].read() == data
        after = scrape(metrics_url)
        key = ("hoard_cachelet_unpacked_store_bytes_total", ())
        fetched = after[key] - before.get(key, 0)
        # The range's blocks (4 of 64 KiB, stored as they are) and the tail
        # on the first read, the rest of the blocks on the whole read.
        assert 0 < fetched <= len(container) + (64 << 10)
    finally:
        s3.meta.events.unregister("before-sign.s3.GetObject", unpacked)
    # Plain S3: the object as stored.
    plain = s3.get_object(Bucket=bucket, Key="model.blk", Range="bytes=100-199")
    assert plain["Body"].read() == container[100:200]
