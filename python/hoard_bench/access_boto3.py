"""GET latency through boto3, for `hoard bench access --boto3`.

Reads a JSON job on stdin (bucket, region, targets with endpoint and
credentials, objects with key, size, warm-up and iteration counts), GETs
every object from every target one request at a time, reading the body in
1 MiB chunks, and prints JSON on stdout: per target and size, the p50 and
every timed sample in nanoseconds. The Go side summarises the samples the
same way as its own.
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time

import boto3
from botocore.config import Config

CHUNK = 1 << 20


def client(target: dict, region: str):
    return boto3.client(
        "s3",
        endpoint_url=target["endpoint"],
        aws_access_key_id=target["access_key"],
        aws_secret_access_key=target["secret_key"],
        region_name=region,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1, "mode": "standard"},
            max_pool_connections=4,
        ),
    )


def get_once(s3, bucket: str, key: str, size: int, expect_read: str | None) -> int:
    start = time.perf_counter_ns()
    resp = s3.get_object(Bucket=bucket, Key=key)
    n = 0
    for chunk in resp["Body"].iter_chunks(CHUNK):
        n += len(chunk)
    elapsed = time.perf_counter_ns() - start
    if n != size:
        raise RuntimeError(f"GET {key}: read {n} bytes, want {size}")
    if expect_read is not None:
        got = resp["ResponseMetadata"]["HTTPHeaders"].get("x-hoard-read")
        if got != expect_read:
            raise RuntimeError(f"GET {key} was served as {got!r}, expected {expect_read!r}")
    return elapsed


def p50(samples: list[int]) -> int:
    ordered = sorted(samples)
    rank = max(1, math.ceil(0.5 * len(ordered)))
    return ordered[rank - 1]


def main() -> int:
    job = json.load(sys.stdin)
    results: dict[str, dict[str, dict]] = {}
    for target in job["targets"]:
        s3 = client(target, job["region"])
        per_size: dict[str, dict] = {}
        for obj in job["objects"]:
            for _ in range(obj["warmup"]):
                get_once(s3, job["bucket"], obj["key"], obj["size"], None)
            samples = [
                get_once(s3, job["bucket"], obj["key"], obj["size"], target.get("expect_read"))
                for _ in range(obj["iterations"])
            ]
            per_size[str(obj["size"])] = {"warmup": obj["warmup"], "p50_ns": p50(samples), "samples_ns": samples}
            print(f"boto3 {target['name']} {obj['size']}: p50 {p50(samples) / 1e6:.3f} ms", file=sys.stderr)
        results[target["name"]] = per_size
    json.dump({"python": platform.python_version(), "boto3": boto3.__version__, "results": results}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
