"""Session fixtures for the hoard end-to-end suite.

The suite starts its own servers as subprocesses on free loopback ports:

* the store: MinIO (default) or versitygw, chosen by ``HOARD_E2E_STORE``;
* the hoard cachelet in front of it, unless ``HOARD_E2E_TARGET=store``, in
  which case the clients talk to the store directly (used to validate the
  tests themselves).

Clients use different credentials for the cachelet and for the store, so a
passing run against ``hoard`` proves that the cachelet verifies requests with
its own keys and re-signs them for the store.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

REPO_ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"

TARGET = os.environ.get("HOARD_E2E_TARGET", "hoard")
STORE_KIND = os.environ.get("HOARD_E2E_STORE", "minio")

if TARGET not in ("hoard", "store"):
    raise pytest.UsageError(f"HOARD_E2E_TARGET must be 'hoard' or 'store', not {TARGET!r}")
if STORE_KIND not in ("minio", "versitygw"):
    raise pytest.UsageError(f"HOARD_E2E_STORE must be 'minio' or 'versitygw', not {STORE_KIND!r}")

# Credentials of the store (used by the cachelet, and by store_s3).
STORE_ACCESS_KEY = "e2estoreadmin"
STORE_SECRET_KEY = "e2e-store-secret-0123456789"
# Credentials of the cachelet's clients: deliberately different.
HOARD_ACCESS_KEY = "e2ehoardclient"
HOARD_SECRET_KEY = "e2e-hoard-secret-9876543210"

STARTUP_TIMEOUT_S = 60.0

# Everything talks to loopback; never let a proxy from the environment in.
for _var in ("NO_PROXY", "no_proxy"):
    _prev = os.environ.get(_var, "")
    os.environ[_var] = ",".join(p for p in (_prev, "127.0.0.1", "localhost") if p)


@dataclasses.dataclass(frozen=True)
class Creds:
    access_key: str
    secret_key: str


@dataclasses.dataclass
class Server:
    name: str
    proc: subprocess.Popen
    log_path: Path

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(cannot read {self.log_path}: {exc})"
        return "\n".join(lines[-n:])

    def check_alive(self) -> None:
        rc = self.proc.poll()
        if rc is not None:
            pytest.fail(
                f"{self.name} exited with status {rc}; last lines of {self.log_path}:\n{self.log_tail()}",
                pytrace=False,
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@dataclasses.dataclass
class Env:
    target: str
    store_kind: str
    store_endpoint: str
    store_creds: Creds
    endpoint: str
    creds: Creds
    metrics_url: str | None
    servers: list[Server]
    tmp: Path


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"hoard e2e: target={TARGET} store={STORE_KIND}"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if TARGET == "hoard":
        return
    skip = pytest.mark.skip(reason="hoard-only test; HOARD_E2E_TARGET=store")
    for item in items:
        if "hoard" in item.keywords:
            item.add_marker(skip)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(env_var: str, default: Path, what: str) -> Path:
    path = Path(os.environ[env_var]) if os.environ.get(env_var) else default
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"{what} binary not found or not executable at {path} (set ${env_var} to override)",
            pytrace=False,
        )
    return path


def _start(name: str, argv: list[str], tmp: Path, env: dict[str, str] | None = None) -> Server:
    log_path = tmp / f"{name}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=full_env,
        cwd=tmp,
    )
    log.close()
    return Server(name=name, proc=proc, log_path=log_path)


def _wait_ready(server: Server, url: str, *, any_status: bool = False) -> None:
    """Poll url until it answers 200 (or any status below 500 if any_status)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    last = "no attempt"
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            if any_status and exc.code < 500:
                return
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = repr(exc)
        time.sleep(0.1)
    rc = server.proc.poll()
    state = f"exited with status {rc}" if rc is not None else f"not ready after {STARTUP_TIMEOUT_S:.0f}s"
    server.stop()
    pytest.fail(
        f"{server.name} {state} (last probe of {url}: {last}); last lines of {server.log_path}:\n{server.log_tail()}",
        pytrace=False,
    )


def _start_minio(tmp: Path) -> tuple[Server, str]:
    binary = _binary("HOARD_MINIO_BIN", REPO_ROOT / ".tools/bin/minio", "MinIO")
    port, console = free_port(), free_port()
    data = tmp / "minio-data"
    data.mkdir()
    server = _start(
        "minio",
        [
            str(binary),
            "server",
            str(data),
            "--address",
            f"127.0.0.1:{port}",
            "--console-address",
            f"127.0.0.1:{console}",
            "--quiet",
        ],
        tmp,
        env={
            "MINIO_ROOT_USER": STORE_ACCESS_KEY,
            "MINIO_ROOT_PASSWORD": STORE_SECRET_KEY,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            "HOME": str(tmp),
        },
    )
    endpoint = f"http://127.0.0.1:{port}"
    _wait_ready(server, f"{endpoint}/minio/health/ready")
    # Readiness can report 200 while S3 calls still get 503 (IAM loading):
    # wait until an unsigned ListBuckets is refused (403) instead.
    _wait_ready(server, f"{endpoint}/", any_status=True)
    return server, endpoint


def _start_versitygw(tmp: Path) -> tuple[Server, str]:
    binary = _binary("HOARD_VERSITYGW_BIN", REPO_ROOT / ".tools/bin/versitygw", "versitygw")
    port = free_port()
    data = tmp / "versitygw-data"
    data.mkdir()
    server = _start(
        "versitygw",
        [
            str(binary),
            "--access",
            STORE_ACCESS_KEY,
            "--secret",
            STORE_SECRET_KEY,
            "--port",
            f"127.0.0.1:{port}",
            "--quiet",
            "posix",
            str(data),
        ],
        tmp,
    )
    endpoint = f"http://127.0.0.1:{port}"
    # versitygw has no health endpoint: any S3 answer (403 to an anonymous
    # ListBuckets) means it is serving.
    _wait_ready(server, f"{endpoint}/", any_status=True)
    return server, endpoint


def _start_hoard(tmp: Path, store_endpoint: str) -> tuple[Server, str, str]:
    binary = _binary("HOARD_BIN", REPO_ROOT / "bin/hoard", "hoard")
    port, metrics_port = free_port(), free_port()
    server = _start(
        "hoard",
        [
            str(binary),
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
            "--region",
            REGION,
            "--access-key",
            HOARD_ACCESS_KEY,
            "--secret-key",
            HOARD_SECRET_KEY,
            "--store-endpoint",
            store_endpoint,
            "--store-access-key",
            STORE_ACCESS_KEY,
            "--store-secret-key",
            STORE_SECRET_KEY,
        ],
        tmp,
    )
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    _wait_ready(server, metrics_url)
    return server, f"http://127.0.0.1:{port}", metrics_url


@pytest.fixture(scope="session")
def e2e_env():
    keep = os.environ.get("HOARD_E2E_KEEP") == "1"
    tmp = Path(tempfile.mkdtemp(prefix="hoard-e2e-"))
    servers: list[Server] = []
    try:
        if STORE_KIND == "minio":
            store, store_endpoint = _start_minio(tmp)
        else:
            store, store_endpoint = _start_versitygw(tmp)
        servers.append(store)
        store_creds = Creds(STORE_ACCESS_KEY, STORE_SECRET_KEY)
        if TARGET == "hoard":
            hoard, endpoint, metrics_url = _start_hoard(tmp, store_endpoint)
            servers.append(hoard)
            creds = Creds(HOARD_ACCESS_KEY, HOARD_SECRET_KEY)
        else:
            endpoint, metrics_url, creds = store_endpoint, None, store_creds
        yield Env(
            target=TARGET,
            store_kind=STORE_KIND,
            store_endpoint=store_endpoint,
            store_creds=store_creds,
            endpoint=endpoint,
            creds=creds,
            metrics_url=metrics_url,
            servers=servers,
            tmp=tmp,
        )
    finally:
        for server in reversed(servers):
            server.stop()
        if keep:
            sys.stderr.write(f"\nhoard e2e: kept {tmp}\n")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def make_client(endpoint: str, creds: Creds | None, **config_kwargs):
    """A boto3 S3 client with path-style addressing and no retries.

    creds=None makes an unsigned client only if signature_version=UNSIGNED is
    passed in config_kwargs.
    """
    cfg = dict(
        region_name=REGION,
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=10,
        read_timeout=120,
        max_pool_connections=16,
    )
    cfg.update(config_kwargs)
    kwargs = {}
    if creds is not None:
        kwargs = dict(aws_access_key_id=creds.access_key, aws_secret_access_key=creds.secret_key)
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=REGION, config=Config(**cfg), **kwargs
    )


@pytest.fixture(scope="session")
def target(e2e_env) -> str:
    return e2e_env.target


@pytest.fixture(scope="session")
def store_kind(e2e_env) -> str:
    return e2e_env.store_kind


@pytest.fixture(scope="session")
def endpoint(e2e_env) -> str:
    return e2e_env.endpoint


@pytest.fixture(scope="session")
def creds(e2e_env) -> Creds:
    return e2e_env.creds


@pytest.fixture(scope="session")
def s3(e2e_env):
    return make_client(e2e_env.endpoint, e2e_env.creds)


@pytest.fixture(scope="session")
def client_factory(e2e_env):
    """make(creds=None, endpoint=None, **botocore Config kwargs) -> client on the target."""

    def make(creds: Creds | None = None, endpoint: str | None = None, **config_kwargs):
        return make_client(endpoint or e2e_env.endpoint, creds or e2e_env.creds, **config_kwargs)

    return make


@pytest.fixture(scope="session")
def store_s3(e2e_env):
    """A client directly on the store, to act behind the cachelet's back."""
    return make_client(e2e_env.store_endpoint, e2e_env.store_creds)


@pytest.fixture(scope="session")
def metrics_url(e2e_env) -> str:
    if e2e_env.metrics_url is None:
        pytest.fail("metrics_url is only available with HOARD_E2E_TARGET=hoard", pytrace=False)
    return e2e_env.metrics_url


@pytest.fixture(autouse=True)
def _servers_alive(request):
    """Fail clearly (with the server log) if a server died during a test."""
    if "e2e_env" not in request.fixturenames:
        yield
        return
    env = request.getfixturevalue("e2e_env")
    for server in env.servers:
        server.check_alive()
    yield
    for server in env.servers:
        server.check_alive()


def empty_bucket(client, name: str) -> None:
    """Delete every object and in-progress multipart upload of a bucket."""
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=name):
        objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if objs:
            client.delete_objects(Bucket=name, Delete={"Objects": objs, "Quiet": True})
    uploads = client.list_multipart_uploads(Bucket=name).get("Uploads", [])
    for up in uploads:
        client.abort_multipart_upload(Bucket=name, Key=up["Key"], UploadId=up["UploadId"])


def _bucket_name(request) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:30].strip("-")
    return f"e2e-{slug}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def bucket(request, s3, store_s3) -> str:
    """A fresh bucket, created through the target, emptied and deleted after.

    Cleanup goes straight to the store so that it does not depend on the
    cachelet behaving.
    """
    name = _bucket_name(request)
    s3.create_bucket(Bucket=name)
    yield name
    try:
        empty_bucket(store_s3, name)
        store_s3.delete_bucket(Bucket=name)
    except Exception as exc:  # cleanup must not mask the test result
        sys.stderr.write(f"\ncleanup of bucket {name} failed: {exc!r}\n")


@pytest.fixture
def bucket_name(request, store_s3) -> str:
    """A fresh bucket name that does not exist yet; deleted after if created."""
    name = _bucket_name(request)
    yield name
    try:
        empty_bucket(store_s3, name)
        store_s3.delete_bucket(Bucket=name)
    except Exception:  # it usually does not exist
        pass


def _aws_binary() -> Path:
    for candidate in (REPO_ROOT / ".venv/bin/aws", Path(sys.executable).parent / "aws"):
        if candidate.is_file():
            return candidate
    pytest.fail("AWS CLI not found in .venv/bin (pip install -r python/requirements.txt)", pytrace=False)


@pytest.fixture(scope="session")
def aws(e2e_env):
    """Run the AWS CLI (v1, from the project venv) against the target.

    aws("s3", "ls", f"s3://{bucket}") -> CompletedProcess (text); raises on a
    non-zero exit unless check=False.
    """
    binary = _aws_binary()
    conf_dir = e2e_env.tmp / "aws"
    conf_dir.mkdir(exist_ok=True)
    config_file = conf_dir / "config"
    config_file.write_text(
        "[default]\n"
        f"region = {REGION}\n"
        "output = json\n"
        "s3 =\n"
        "    addressing_style = path\n"
        "    signature_version = s3v4\n"
        "    multipart_threshold = 8MB\n"
        "    multipart_chunksize = 8MB\n"
        "    max_concurrent_requests = 4\n"
    )
    credentials_file = conf_dir / "credentials"
    credentials_file.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL=e2e_env.endpoint,
        AWS_ACCESS_KEY_ID=e2e_env.creds.access_key,
        AWS_SECRET_ACCESS_KEY=e2e_env.creds.secret_key,
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE=str(config_file),
        AWS_SHARED_CREDENTIALS_FILE=str(credentials_file),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_MAX_ATTEMPTS="1",
        AWS_RETRY_MODE="standard",
    )

    def run(*args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(binary), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"aws {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}",
                pytrace=False,
            )
        return proc

    return run
