"""The local serverless platform as a user drives it: `hoard up --detach`,
then `hoard deploy`, `hoard invoke`, `hoard apps`, `hoard logs`, an HTTP
trigger and an object trigger, with an unmodified boto3 function; and every
example application deployed by `hoard up` and run on tiny data.

`hoard up` starts its own MinIO, etcd, controller and agent, so this module
runs once per suite (in the MinIO pass).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from conftest import REPO_ROOT, STORE_KIND, free_port

pytestmark = [
    pytest.mark.hoard,
    pytest.mark.skipif(STORE_KIND != "minio", reason="runs on hoard up's own MinIO, once per suite (the MinIO pass)"),
]

FUNCTION = '''
import urllib.parse

import boto3

s3 = boto3.client("s3")


def handler(event, context):
    """Written for AWS: read an object, transform it, write the result."""
    body = s3.get_object(Bucket=event["bucket"], Key=event["key"])["Body"].read()
    s3.put_object(Bucket=event["bucket"], Key="upper/" + event["key"], Body=body.upper())
    print("transformed", event["key"])
    return {"bytes": len(body), "request": context.aws_request_id}


def on_upload(event, context):
    key = urllib.parse.unquote_plus(event["Records"][0]["s3"]["object"]["key"])
    s3.put_object(Bucket="uploads", Key="seen/" + key.replace("/", "_"), Body=b"1")
    return key


def web(event, context):
    return {"statusCode": 200, "headers": {"content-type": "text/plain"}, "body": "hi " + event["body"]}


def boom(event, context):
    raise RuntimeError("kaboom")
'''

SPEC = """
name: myapp
memory: 128MiB
keep_alive: 5m
buckets: {data: read-write, uploads: read-write}
functions:
  upper: {handler: main.handler}
  on_upload: {handler: main.on_upload}
  web: {handler: main.web}
  boom: {handler: main.boom}
triggers:
  - {http: /hello, function: web}
  - {object: {bucket: uploads, prefix: in/}, function: on_upload}
"""


def _hoard() -> Path:
    return Path(os.environ.get("HOARD_BIN", REPO_ROOT / "bin" / "hoard"))


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(_hoard()), *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO_ROOT
    )


def _read_env(path: Path) -> dict[str, str]:
    return dict(line.partition("=")[::2] for line in path.read_text().splitlines())


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    state = tmp_path_factory.mktemp("platform") / "state"
    proc = _run(
        "up",
        "--detach",
        "--dir",
        str(state),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--store-listen",
        f"127.0.0.1:{free_port()}",
        "--controller-listen",
        f"127.0.0.1:{free_port()}",
        "--budget",
        "32MiB",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:
        yield state, _read_env(state / "env")
    finally:
        down = _run("down", "--dir", str(state))
        assert down.returncode == 0, down.stderr


def _store(state: Path, env: dict[str, str]):
    creds = json.loads((state / "credentials.json").read_text())
    return boto3.client(
        "s3",
        endpoint_url=env["HOARD_STORE_ENDPOINT"],
        aws_access_key_id=creds["store_access_key"],
        aws_secret_access_key=creds["store_secret_key"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


def _eventually(what, f, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if f():
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout}s")
        time.sleep(0.2)


def test_deploy_and_invoke_own_function(up, tmp_path):
    state, env = up
    app = tmp_path / "myapp"
    app.mkdir()
    (app / "hoard.yaml").write_text(SPEC)
    (app / "main.py").write_text(FUNCTION)
    d = "--dir", str(state)

    deployed = _run("deploy", *d, str(app))
    assert deployed.returncode == 0, deployed.stderr
    assert "deployed myapp version 1" in deployed.stdout

    store = _store(state, env)
    store.create_bucket(Bucket="data")
    store.put_object(Bucket="data", Key="in.txt", Body=b"serverless data")

    first = _run("invoke", *d, "myapp", "upper", "--data", '{"bucket": "data", "key": "in.txt"}', "--log")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["bytes"] == 15
    assert "transformed in.txt" in first.stderr
    assert "cold start" in first.stderr
    assert store.get_object(Bucket="data", Key="upper/in.txt")["Body"].read() == b"SERVERLESS DATA"
    second = _run("invoke", *d, "myapp", "upper", "--data", '{"bucket": "data", "key": "in.txt"}')
    assert second.returncode == 0
    assert "warm start" in second.stderr

    failed = _run("invoke", *d, "myapp", "boom")
    assert failed.returncode == 1
    assert "RuntimeError: kaboom" in failed.stderr

    bad = _run("invoke", *d, "myapp", "upper", "--data", "{not json")
    assert bad.returncode == 2
    assert "not valid JSON" in bad.stderr
    missing = _run("invoke", *d, "nosuchapp", "upper")
    assert missing.returncode == 1
    assert "no application" in missing.stderr

    # An HTTP trigger: open, like a function URL.
    req = urllib.request.Request(env["HOARD_CONTROLLER_URL"] + "/http/myapp/hello", data=b"there", method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
        assert resp.read() == b"hi there"

    # An object written to the store directly fires on_upload.
    store.put_object(Bucket="uploads", Key="in/photo.jpg", Body=b"jpeg")
    _eventually(
        "the store's notification ran on_upload", lambda: store.head_object(Bucket="uploads", Key="seen/in_photo.jpg")
    )

    apps = _run("apps", *d)
    assert apps.returncode == 0
    line = next(x for x in apps.stdout.splitlines() if x.startswith("myapp"))
    assert "upper" in line
    assert "on_upload" in line

    logs = _run("logs", *d, "myapp", "--function", "upper", "-n", "5")
    assert logs.returncode == 0
    assert logs.stdout.count("myapp/upper") == 2
    assert "transformed in.txt" in logs.stdout

    # The function reaches only the buckets its spec grants.
    store.create_bucket(Bucket="elsewhere")
    store.put_object(Bucket="elsewhere", Key="in.txt", Body=b"not yours")
    denied = _run("invoke", *d, "myapp", "upper", "--data", '{"bucket": "elsewhere", "key": "in.txt"}')
    assert denied.returncode == 1
    assert "AccessDenied" in denied.stderr, denied.stderr

    errors = _run("logs", *d, "myapp", "--errors")
    assert "RuntimeError: kaboom" in errors.stdout

    # /metrics is behind the admin token, like the rest of the API.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(env["HOARD_CONTROLLER_URL"] + "/metrics", timeout=10)
    assert refused.value.code == 401
    req = urllib.request.Request(
        env["HOARD_CONTROLLER_URL"] + "/metrics",
        headers={"Authorization": "Bearer " + env["HOARD_CONTROLLER_TOKEN"]},
    )
    metrics = urllib.request.urlopen(req, timeout=10).read().decode()
    assert 'hoard_invocations_total{app="myapp",function="upper",result="ok",start="cold"} 1' in metrics


EXAMPLE_RUNS = [
    ("ml-inference", ["invoke", "--pipeline", "ml-inference", "inference"]),
    ("image-processing", ["invoke", "--pipeline", "image-processing", "process"]),
    ("wordcount", ["invoke", "--pipeline", "wordcount", "wordcount"]),
    ("notebook", ["invoke", "notebook", "cell"]),
    ("video", ["invoke", "--pipeline", "video", "transcode"]),
]


@pytest.mark.parametrize(("app", "run"), EXAMPLE_RUNS, ids=[a for a, _ in EXAMPLE_RUNS])
def test_example_applications(up, app, run):
    """Every example is deployed by `hoard up` and runs on the platform."""
    state, _ = up
    d = "--dir", str(state)
    demo = json.loads((REPO_ROOT / "examples" / app / "demo.json").read_text())
    event = dict(demo["prepare"].get("event", {}), scale=0.01)
    prep = _run("invoke", *d, app, demo["prepare"]["function"], "--data", json.dumps(event))
    assert prep.returncode == 0, prep.stderr
    for step in demo["steps"]:
        ev = dict(step.get("event", {}), scale=0.01)
        if "pipeline" in step:
            out = _run("invoke", *d, "--pipeline", app, step["pipeline"], "--data", json.dumps(ev))
            assert out.returncode == 0, out.stdout + out.stderr
            result = json.loads(out.stdout)
            assert result["ok"], result
            if result.get("intermediate"):
                assert result["dropped"] >= 0
        else:
            out = _run("invoke", *d, app, step["function"], "--data", json.dumps(ev))
            assert out.returncode == 0, out.stdout + out.stderr


def test_component_logs(up):
    """Each component of `hoard up` logs to its own file under DIR/logs."""
    state, _ = up
    d = "--dir", str(state)
    for name in ("controller.log", "agent.log", "cachelet-0.log", "etcd.log", "minio.log"):
        assert (state / "logs" / name).is_file(), name
    controller = _run("logs", *d, "--component", "controller", "-n", "0")
    assert controller.returncode == 0, controller.stderr
    assert "controller state loaded" in controller.stdout
    unknown = _run("logs", *d, "--component", "nosuch")
    assert unknown.returncode == 1
    assert "there are: agent, cachelet-0, controller, etcd" in unknown.stderr
