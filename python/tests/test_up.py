"""`hoard up --detach` and `hoard down`: the local default, as a user runs it.

`hoard up` starts its own MinIO (this module does not use the session's
servers): it must write `.hoard/env` with working settings, serve S3 through
the cachelet, expose metrics, and stop cleanly with `hoard down`.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from conftest import REPO_ROOT, free_port

pytestmark = pytest.mark.hoard

ENV_KEYS = {
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "HOARD_STORE_ENDPOINT",
    "HOARD_METRICS_URL",
    "HOARD_ENDPOINTS",
    "HOARD_METRICS_URLS",
    "HOARD_CONTROLLER_URL",
    "HOARD_CONTROLLER_TOKEN",
}


def _hoard() -> Path:
    return Path(os.environ.get("HOARD_BIN", REPO_ROOT / "bin" / "hoard"))


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([str(_hoard()), *args], capture_output=True, text=True, timeout=timeout, check=False)


def _read_env(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition("=")
        env[name] = value
    return env


def test_up_detach_then_down(tmp_path):
    state = tmp_path / "state"
    ports = [free_port() for _ in range(4)]
    up = _run(
        "up",
        "--detach",
        "--dir",
        str(state),
        "--listen",
        f"127.0.0.1:{ports[0]}",
        "--metrics-listen",
        f"127.0.0.1:{ports[1]}",
        "--store-listen",
        f"127.0.0.1:{ports[2]}",
        "--controller-listen",
        f"127.0.0.1:{ports[3]}",
        "--examples",
        "none",
        "--budget",
        "64MiB",
    )
    try:
        assert up.returncode == 0, up.stderr
        env = _read_env(state / "env")
        assert set(env) == ENV_KEYS
        assert env["HOARD_CONTROLLER_URL"] == f"http://127.0.0.1:{ports[3]}"
        assert env["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{ports[0]}"
        assert env["HOARD_STORE_ENDPOINT"] == f"http://127.0.0.1:{ports[2]}"

        # A second `up` on the same state directory refuses to start.
        again = _run("up", "--detach", "--dir", str(state))
        assert again.returncode != 0
        assert "already running" in again.stderr

        s3 = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_DEFAULT_REGION"],
            config=Config(s3={"addressing_style": "path"}),
        )
        s3.create_bucket(Bucket="up-test")
        s3.put_object(Bucket="up-test", Key="k", Body=b"through the local default")
        for _ in range(2):
            assert s3.get_object(Bucket="up-test", Key="k")["Body"].read() == b"through the local default"
        # A read is counted when the cachelet closes its body, which may be
        # just after the client has the last byte: scrape until it shows.
        series = 'hoard_cachelet_reads_total{outcome="local_hit"}'
        deadline = time.monotonic() + 30
        while True:
            metrics = urllib.request.urlopen(env["HOARD_METRICS_URL"], timeout=10).read().decode()
            if series in metrics or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert series in metrics

        # The store behind it really is a separate MinIO with its own keys.
        store = boto3.client(
            "s3",
            endpoint_url=env["HOARD_STORE_ENDPOINT"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )
        with pytest.raises(Exception, match="InvalidAccessKeyId"):
            store.list_buckets()
    finally:
        down = _run("down", "--dir", str(state))
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout
    assert not (state / "env").exists()
    assert not (state / "hoard.pid").exists()
    # Data survives a restart of the local default: it lives under --dir.
    assert (state / "minio").is_dir()
    # A second `down` has nothing to stop.
    assert "not running" in _run("down", "--dir", str(state)).stdout


def test_up_three_cachelets(tmp_path):
    """`hoard up --cachelets 3`: three cachelets of one application, one ring."""
    state = tmp_path / "state"
    up = _run(
        "up",
        "--detach",
        "--dir",
        str(state),
        "--cachelets",
        "3",
        "--no-platform",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--store-listen",
        f"127.0.0.1:{free_port()}",
        "--budget",
        "64MiB",
    )
    try:
        assert up.returncode == 0, up.stderr
        env = _read_env(state / "env")
        endpoints = env["HOARD_ENDPOINTS"].split(",")
        assert len(endpoints) == 3
        assert len(set(endpoints)) == 3
        assert env["AWS_ENDPOINT_URL"] == endpoints[0]
        assert "HOARD_CONTROLLER_URL" not in env
        assert len(env["HOARD_METRICS_URLS"].split(",")) == 3
        assert "peer_secret" in (state / "credentials.json").read_text()

        def client(endpoint):
            return boto3.client(
                "s3",
                endpoint_url=endpoint,
                aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                region_name=env["AWS_DEFAULT_REGION"],
                config=Config(s3={"addressing_style": "path"}),
            )

        s3 = [client(e) for e in endpoints]
        s3[0].create_bucket(Bucket="ring-test")
        for i in range(8):
            s3[i % 3].put_object(Bucket="ring-test", Key=f"k{i}", Body=f"value {i}".encode())
        for i in range(8):
            for c in s3:
                assert c.get_object(Bucket="ring-test", Key=f"k{i}")["Body"].read() == f"value {i}".encode()
    finally:
        down = _run("down", "--dir", str(state))
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout
    assert not (state / "env").exists()
    for endpoint in endpoints:
        with pytest.raises(OSError):
            urllib.request.urlopen(endpoint, timeout=5)
