"""The AWS CLI (v1) against the target: s3 cp / sync / ls, s3api head-object."""

from __future__ import annotations

import filecmp
import json
import os
import time

from s3util import MiB, list_keys, random_bytes


def test_cli_cp_up_and_down_multipart(aws, s3, bucket, tmp_path):
    data = random_bytes(20 * MiB)  # above the 8 MiB multipart threshold of the CLI config
    src = tmp_path / "up.bin"
    src.write_bytes(data)
    aws("s3", "cp", str(src), f"s3://{bucket}/cli/up.bin")
    head = s3.head_object(Bucket=bucket, Key="cli/up.bin")
    assert head["ContentLength"] == len(data)
    assert "-" in head["ETag"], "the CLI should have used a multipart upload"
    dst = tmp_path / "down.bin"
    aws("s3", "cp", f"s3://{bucket}/cli/up.bin", str(dst))
    assert dst.read_bytes() == data


def test_cli_cp_stdin_stdout(aws, bucket, tmp_path):
    src = tmp_path / "small.txt"
    src.write_text("small file via the CLI\n")
    aws("s3", "cp", str(src), f"s3://{bucket}/small.txt", "--content-type", "text/x-hoard")
    out = aws("s3", "cp", f"s3://{bucket}/small.txt", "-")
    assert out.stdout == "small file via the CLI\n"


def _make_tree(root):
    files = {
        "top.txt": b"top level\n",
        "a/one.txt": b"one\n",
        "a/two.bin": random_bytes(300 * 1024),
        "a/b/three.txt": b"three\n",
        "a/b/c/four with space.txt": b"four\n",
        "empty.txt": b"",
    }
    # An hour old, so that "newer than the remote copy" does not depend on
    # the store's LastModified precision (versitygw truncates to seconds).
    old = time.time() - 3600
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
        os.utime(p, (old, old))
    return files


def test_cli_sync_up_and_back(aws, s3, bucket, tmp_path):
    up = tmp_path / "up"
    files = _make_tree(up)
    aws("s3", "sync", str(up), f"s3://{bucket}/tree")
    assert sorted(list_keys(s3, bucket)) == sorted(f"tree/{rel}" for rel in files)

    # A second sync uploads nothing.
    again = aws("s3", "sync", str(up), f"s3://{bucket}/tree")
    assert "upload:" not in again.stdout

    down = tmp_path / "down"
    aws("s3", "sync", f"s3://{bucket}/tree", str(down))
    for rel, content in files.items():
        assert (down / rel).read_bytes() == content, rel
    cmp = filecmp.dircmp(up, down)
    assert not cmp.left_only
    assert not cmp.right_only

    # Deleting locally and syncing with --delete removes the remote object.
    (up / "a/one.txt").unlink()
    out = aws("s3", "sync", str(up), f"s3://{bucket}/tree", "--delete")
    assert "delete:" in out.stdout
    assert "tree/a/one.txt" not in list_keys(s3, bucket)


def test_cli_ls(aws, s3, bucket):
    s3.put_object(Bucket=bucket, Key="dir/file1.txt", Body=b"12345")
    s3.put_object(Bucket=bucket, Key="dir/sub/file2.txt", Body=b"x")
    s3.put_object(Bucket=bucket, Key="root.txt", Body=b"abc")

    buckets = aws("s3", "ls").stdout
    assert bucket in buckets

    top = aws("s3", "ls", f"s3://{bucket}/").stdout
    assert "PRE dir/" in top
    assert "root.txt" in top
    assert "file1.txt" not in top

    rec = aws("s3", "ls", "--recursive", f"s3://{bucket}/").stdout
    lines = [ln.split() for ln in rec.splitlines() if ln.strip()]
    assert sorted((ln[-1], int(ln[-2])) for ln in lines) == [
        ("dir/file1.txt", 5),
        ("dir/sub/file2.txt", 1),
        ("root.txt", 3),
    ]

    missing = aws("s3", "ls", f"s3://{bucket}/nothing/", check=False)
    assert missing.returncode == 1
    assert missing.stdout.strip() == ""


def test_cli_s3api_head_object(aws, s3, bucket):
    s3.put_object(Bucket=bucket, Key="h.txt", Body=b"head me", ContentType="text/plain", Metadata={"k": "v"})
    out = json.loads(aws("s3api", "head-object", "--bucket", bucket, "--key", "h.txt").stdout)
    assert out["ContentLength"] == len(b"head me")
    assert out["ContentType"] == "text/plain"
    assert out["Metadata"] == {"k": "v"}
    missing = aws("s3api", "head-object", "--bucket", bucket, "--key", "nope", check=False)
    assert missing.returncode != 0
    assert "404" in missing.stderr


def test_cli_rm_recursive(aws, s3, bucket):
    for k in ("r/1", "r/2", "r/3/4", "stay"):
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    aws("s3", "rm", "--recursive", f"s3://{bucket}/r/")
    assert list_keys(s3, bucket) == ["stay"]
