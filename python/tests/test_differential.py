"""Differential test: every case of diff_cases.py is run against the store
directly and through hoard, each time in a fresh bucket, and the outcomes
(status, error code, the headers that matter, the body) must be equal.

Two set-ups: the session's one cachelet in front of the session's store,
and, with MinIO, a ring of three cachelets under the ``owner`` consistency
setting (``hoard up --cachelets 3 --no-platform``, its own MinIO), with
each call of a case sent to the next cachelet of the ring.

Differences that are known are listed in s3_differences.json with their
reason (and in docs/s3-api.md): a case differing that is not listed fails,
and so does a listed case that no longer differs, so the list stays true.
With ``HOARD_DIFF_REPORT=path``, every difference seen, listed or not, is
appended there as JSON lines (as the Go test does), to review the list.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request

import pytest
import s3_differences_doc
from botocore.exceptions import ClientError
from diff_cases import CASES, Case
from differential import (
    READ_TIMEOUT_S,
    Ctx,
    Recorder,
    Target,
    attach_recorder,
    diff_steps,
    load_differences,
    new_bucket_prefix,
)

from conftest import REPO_ROOT, STORE_KIND, Creds, free_port, make_client

pytestmark = pytest.mark.hoard

DIFFERENCES = load_differences()
REPORT = os.environ.get("HOARD_DIFF_REPORT")
SETUPS = ["one"] + (["owner"] if STORE_KIND == "minio" else [])


def _target(name: str, endpoints: list[str], creds: Creds, store_endpoint: str, store_creds: Creds) -> Target:
    clients = [make_client(e, creds, read_timeout=READ_TIMEOUT_S) for e in endpoints]
    sigv2 = [make_client(e, creds, signature_version="s3", read_timeout=READ_TIMEOUT_S) for e in endpoints]
    return Target(
        name=name,
        clients=clients,
        endpoints=endpoints,
        creds=creds,
        sigv2=sigv2,
        store=make_client(store_endpoint, store_creds, read_timeout=READ_TIMEOUT_S),
    )


def _pair(endpoints: list[str], creds: Creds, store_endpoint: str, store_creds: Creds) -> tuple[Target, Target]:
    store = _target("store", [store_endpoint], store_creds, store_endpoint, store_creds)
    hoard = _target("hoard", endpoints, creds, store_endpoint, store_creds)
    return store, hoard


@pytest.fixture(scope="module")
def one(e2e_env):
    return _pair([e2e_env.endpoint], e2e_env.creds, e2e_env.store_endpoint, e2e_env.store_creds)


def _hoard_bin() -> str:
    return os.environ.get("HOARD_BIN") or str(REPO_ROOT / "bin" / "hoard")


@pytest.fixture(scope="module")
def owner(tmp_path_factory):
    """Three cachelets of one application, consistency owner, their own MinIO."""
    state = tmp_path_factory.mktemp("owner") / "state"
    up = subprocess.run(
        [
            _hoard_bin(),
            "up",
            "--detach",
            "--dir",
            str(state),
            "--cachelets",
            "3",
            "--no-platform",
            "--consistency",
            "owner",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--store-listen",
            f"127.0.0.1:{free_port()}",
            "--budget",
            "64MiB",
            "--log-level",
            "warn",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    try:
        assert up.returncode == 0, f"hoard up failed:\n{up.stderr}"
        env = dict(line.partition("=")[::2] for line in (state / "env").read_text().splitlines())
        creds = json.loads((state / "credentials.json").read_text())
        endpoints = env["HOARD_ENDPOINTS"].split(",")
        assert len(endpoints) == 3
        yield _pair(
            endpoints,
            Creds(creds["access_key"], creds["secret_key"]),
            env["HOARD_STORE_ENDPOINT"],
            Creds(creds["store_access_key"], creds["store_secret_key"]),
        )
    finally:
        subprocess.run([_hoard_bin(), "down", "--dir", str(state)], capture_output=True, timeout=60, check=False)


def run_case(target: Target, c: Case) -> list[dict]:
    """Run c once on target in fresh buckets; returns its normalised steps."""
    prefix = new_bucket_prefix()
    slug = re.sub(r"[^a-z0-9]+", "-", c.id.lower()).strip("-")[:36].strip("-")
    bucket = f"{prefix}-{slug}"
    recorder = Recorder()
    for client in target.clients + target.sigv2:
        attach_recorder(client, recorder)
    try:
        # Set-up the store may not support (versitygw: no versioning, no
        # lock) leaves a plain bucket: both runs see the same.
        made = False
        if c.bucket and c.lock:
            made = _try(lambda: target.store.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True))
        if c.bucket and not made:
            target.clients[0].create_bucket(Bucket=bucket)
        if c.versioned:
            _try(
                lambda: target.store.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
            )
        ctx = Ctx(target=target, prefix=prefix, bucket=bucket, recorder=recorder)
        c.fn(ctx)
        return ctx.steps
    finally:
        for client in target.clients + target.sigv2:
            client.meta.events.unregister("after-call.s3", recorder.after_call)


def _try(fn) -> bool:
    try:
        fn()
        return True
    except ClientError:
        return False


def check(setup: str, case_id: str, pair: tuple[Target, Target]) -> None:
    store, hoard = pair
    c = CASES[case_id]
    want = run_case(store, c)
    got = run_case(hoard, c)
    diffs = diff_steps(want, got)
    if REPORT:
        # Every difference seen, listed or not: to review the list.
        with open(REPORT, "a") as f:
            f.write(json.dumps({"case": case_id, "setup": setup, "store": STORE_KIND, "diffs": diffs}) + "\n")
    listed = DIFFERENCES.get(f"boto3/{case_id}")
    applies = listed is not None and listed.applies(setup, STORE_KIND)
    maybe = listed is not None and listed.may_apply(setup, STORE_KIND)
    if diffs and not applies and not maybe:
        pytest.fail(
            f"{case_id} ({setup}, {STORE_KIND}): hoard answers differently from the store, "
            "and s3_differences.json does not list it:\n  " + "\n  ".join(diffs),
            pytrace=False,
        )
    if applies and not diffs and not maybe:
        pytest.fail(
            f"{case_id} ({setup}, {STORE_KIND}) is listed in s3_differences.json ({listed.reason}) "
            "but no longer differs: remove it there and run python/tests/s3_differences_doc.py",
            pytrace=False,
        )


@pytest.mark.parametrize(
    ("setup", "case_id"),
    [(s, c) for s in SETUPS for c in sorted(CASES) if s == "one" or not CASES[c].not_in_ring],
)
def test_case(request, setup, case_id):
    check(setup, case_id, request.getfixturevalue(setup))


def test_differences_are_documented():
    """Every listed difference names a case, and the list in docs/s3-api.md
    is the one s3_differences_doc.py makes from s3_differences.json: no case
    or reason in one that the other lacks."""
    for case_id, d in DIFFERENCES.items():
        client, _, name = case_id.partition("/")
        if client == "boto3":
            assert name in CASES, f"s3_differences.json lists {case_id}, which is no case"
        assert d.reason, case_id
    doc = (REPO_ROOT / "docs" / "s3-api.md").read_text()
    section = doc.split("## Differences from the store", 1)
    assert len(section) == 2, "docs/s3-api.md lacks its 'Differences from the store' section"
    documented = s3_differences_doc.documented(section[1])
    assert documented, "docs/s3-api.md's 'Differences from the store' lacks the generated list"
    assert documented == s3_differences_doc.generated(), (
        "docs/s3-api.md's list of differences is not the one s3_differences.json makes: "
        "run .venv/bin/python python/tests/s3_differences_doc.py"
    )


def test_differences_doc_follows_the_json():
    """The generated list changes with the JSON: a case added or removed
    there shows, or stops showing, in the list."""
    raw = json.loads(s3_differences_doc.JSON_FILE.read_text())
    extra = dict(raw, **{"boto3/no.such_case": {"reason": "a reason of no other case", "where": ["one/minio"]}})
    made = s3_differences_doc.generated(extra)
    assert "| a reason of no other case | `boto3/no.such_case` (one/minio) |" in made
    assert made != s3_differences_doc.generated(raw)
    first = sorted(raw)[0]
    fewer = {k: v for k, v in raw.items() if k != first}
    assert f"`{first}`" not in s3_differences_doc.generated(fewer)


def test_awscli_presigned_get(aws, s3, bucket):
    """A URL presigned by the AWS CLI (`aws s3 presign`) works through hoard."""
    body = b"presigned by the AWS CLI"
    s3.put_object(Bucket=bucket, Key="cli/k", Body=body, ContentType="text/x-cli")
    url = aws("s3", "presign", f"s3://{bucket}/cli/k", "--expires-in", "300").stdout.strip()
    assert "X-Amz-Signature=" in url, url
    with urllib.request.urlopen(url, timeout=READ_TIMEOUT_S) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/x-cli"
        assert resp.read() == body
    tampered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(tampered, timeout=READ_TIMEOUT_S)
    assert excinfo.value.code == 403
