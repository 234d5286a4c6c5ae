"""Application B's function: a hostile tenant.

attack() tries, from inside its jail, everything a function of B could
use against application A, the platform and its own sandbox, and reports
each attempt as a row:

    {"group": ..., "attempt": ..., "ok": bool, "detail": str, "data": str}

"ok" is true when the attempt got what it wanted (an S3 call that did not
fail, a file it could read, a port that answered other than 401/403...);
"data" is whatever it read (cut at 64 KiB), so that the test can look for
the platform's secrets in it. It also reports what a function is meant
to be able to do (its own bucket, /tmp) and what it sees of its jail.
"""

import ctypes
import errno
import json
import os
import signal
import socket
import time
import urllib.request

import boto3
import botocore
from botocore.config import Config

MAX_DATA = 64 << 10

rows = []


def row(group, attempt, ok, detail="", data=""):
    rows.append(
        {
            "group": group,
            "attempt": attempt,
            "ok": bool(ok),
            "detail": str(detail)[:300],
            "data": data[:MAX_DATA] if isinstance(data, str) else "",
        }
    )


def text(b):
    return (
        b.decode(errors="replace")
        if isinstance(b, bytes)
        else json.dumps(b, default=str)
    )


def s3_attempt(group, attempt, f):
    """An S3 call: ok unless the server refused it."""
    try:
        out = f()
        row(group, attempt, True, "succeeded", text(out) if out is not None else "")
    except botocore.exceptions.ClientError as e:
        row(group, attempt, False, e.response["Error"]["Code"])
    except Exception as e:  # urllib's HTTPError, a connection refused
        row(group, attempt, False, "%s: %s" % (type(e).__name__, getattr(e, "code", e)))


def read_attempt(group, attempt, path):
    """Reading a file or listing a directory: ok if it could."""
    try:
        if os.path.isdir(path):
            data = "\n".join(sorted(os.listdir(path)))
        else:
            with open(path, "rb") as f:
                data = text(f.read(MAX_DATA))
        row(group, attempt, True, path + ": read", data)
    except OSError as e:
        row(group, attempt, False, "%s: %s: %s" % (path, type(e).__name__, e.strerror))


def write_attempt(group, attempt, path):
    try:
        with open(path, "w") as f:
            f.write("x")
        row(group, attempt, True, "written")
    except OSError as e:
        row(group, attempt, False, "%s: %s" % (type(e).__name__, e.strerror))


def connect_attempt(attempt, hostport):
    """A TCP connection: ok if it connects and the listener does not
    refuse an unauthenticated HTTP request (401 or 403)."""
    host, port = hostport.rsplit(":", 1)
    try:
        s = socket.create_connection((host, int(port)), timeout=2)
    except OSError as e:
        row(
            "network",
            attempt,
            False,
            "%s: %s: %s" % (hostport, type(e).__name__, e.strerror or e),
        )
        return
    try:
        s.settimeout(2)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = s.recv(4096)
    except OSError as e:
        answer = ("no answer: %s" % e).encode()
    finally:
        s.close()
    status = answer.split(b"\r\n", 1)[0]
    refused = status.startswith(b"HTTP/1.1 401") or status.startswith(b"HTTP/1.1 403")
    row(
        "network",
        attempt,
        not refused,
        hostport + ": connected: " + text(status),
        text(answer),
    )


def fork_bomb(n):
    kids, err = [], None
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError as e:
            err = errno.errorcode.get(e.errno, str(e.errno))
            break
        if pid == 0:
            try:
                os.execv("/bin/sleep", ["sleep", "60"])
            finally:
                os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.kill(pid, signal.SIGKILL)
    for pid in kids:
        os.waitpid(pid, 0)
    row(
        "jail",
        "fork %d children" % n,
        err != "EAGAIN" or len(kids) >= n,
        "forked %d, then %s" % (len(kids), err),
    )


def orphans(n):
    """Double-forks n children that exit at once: orphans, reparented to
    the jail's init, which must reap them."""
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            if os.fork() == 0:
                os._exit(0)
            os._exit(0)
        os.waitpid(pid, 0)
    others = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        others = [
            p
            for p in os.listdir("/proc")
            if p.isdigit() and int(p) not in (1, os.getpid())
        ]
        if not others:
            break
        time.sleep(0.02)
    row(
        "jail",
        "leave %d zombies behind" % n,
        bool(others),
        "%d processes left" % len(others),
    )


def denied_syscalls(numbers):
    """Makes each system call the jail's seccomp filter denies; with the
    arguments given here an unprivileged process without the filter
    would see some succeed (unshare into a user namespace, keyctl,
    process_vm_readv of itself, ptrace(TRACEME), last)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    args = {
        "unshare": [0x10000000],  # CLONE_NEWUSER
        "keyctl": [0, ctypes.c_ulong(0xFFFFFFFD), 1],  # the session keyring's id
        "process_vm_readv": [os.getpid()],
    }
    for name in sorted(numbers, key=lambda n: n == "ptrace"):
        a = [ctypes.c_ulong(x) if isinstance(x, int) else x for x in args.get(name, [])]
        a += [ctypes.c_ulong(0)] * (6 - len(a))
        ctypes.set_errno(0)
        ret = libc.syscall(ctypes.c_long(numbers[name]), *a)
        err = ctypes.get_errno()
        refused = ret == -1 and err == errno.EPERM
        row(
            "seccomp",
            name,
            not refused,
            "returned %d, errno %s" % (ret, errno.errorcode.get(err, err)),
        )


def public_policy(bucket):
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": ["*"]},
                "Action": ["s3:GetObject"],
                "Resource": ["arn:aws:s3:::" + bucket + "/*"],
            }
        ],
    }


def part_copy(s3, own, victim):
    up = s3.create_multipart_upload(Bucket=own, Key="stolen.bin")["UploadId"]
    try:
        s3.upload_part_copy(
            Bucket=own,
            Key="stolen.bin",
            UploadId=up,
            PartNumber=1,
            CopySource={"Bucket": victim, "Key": "secret.txt"},
        )
    finally:
        s3.abort_multipart_upload(Bucket=own, Key="stolen.bin", UploadId=up)


def noop(event, context):
    return "ok"


def attack(event, context):
    a, own = event["victim"], event["own"]
    pkg, meta = event["package"], event["meta"]
    s3 = boto3.client("s3")
    g = "S3 through its cachelet"
    for name, f in {
        "list A's objects": lambda: s3.list_objects_v2(Bucket=a),
        "list A's objects (v1)": lambda: s3.list_objects(Bucket=a),
        "head A's bucket": lambda: s3.head_bucket(Bucket=a),
        "read A's object": lambda: s3.get_object(Bucket=a, Key="secret.txt")[
            "Body"
        ].read(),
        "head A's object": lambda: s3.head_object(Bucket=a, Key="secret.txt"),
        "overwrite A's object": lambda: s3.put_object(
            Bucket=a, Key="secret.txt", Body=b"pwned"
        ),
        "add to A's bucket": lambda: s3.put_object(
            Bucket=a, Key="planted.txt", Body=b"pwned"
        ),
        "delete A's object": lambda: s3.delete_object(Bucket=a, Key="secret.txt"),
        "delete A's objects (batch)": lambda: s3.delete_objects(
            Bucket=a, Delete={"Objects": [{"Key": "secret.txt"}]}
        ),
        "copy A's object out": lambda: s3.copy_object(
            Bucket=own, Key="stolen.txt", CopySource={"Bucket": a, "Key": "secret.txt"}
        ),
        "copy over A's object": lambda: s3.copy_object(
            Bucket=a, Key="secret.txt", CopySource={"Bucket": own, "Key": "mine.txt"}
        ),
        "multipart into A's bucket": lambda: s3.create_multipart_upload(
            Bucket=a, Key="mp.bin"
        ),
        "create a bucket": lambda: s3.create_bucket(Bucket="tb-new-bucket"),
        "create A's bucket again": lambda: s3.create_bucket(Bucket=a),
        "delete A's bucket": lambda: s3.delete_bucket(Bucket=a),
        "delete its own bucket": lambda: s3.delete_bucket(Bucket=own),
        "read A's code package": lambda: s3.get_object(
            Bucket="hoard-platform", Key=pkg
        )["Body"].read(),
        "list the platform bucket": lambda: s3.list_objects_v2(Bucket="hoard-platform"),
        "read A's access metadata": lambda: s3.get_object(
            Bucket="hoard-platform", Key=meta
        )["Body"].read(),
        "rewrite A's access metadata": lambda: s3.put_object(
            Bucket="hoard-platform", Key=meta, Body=b"[]"
        ),
        "presigned read of A's object": lambda: urllib.request.urlopen(
            s3.generate_presigned_url(
                "get_object", Params={"Bucket": a, "Key": "secret.txt"}
            ),
            timeout=10,
        ).read(),
        # Operations passed through to the store are held to the same grants.
        "list A's versions": lambda: s3.list_object_versions(Bucket=a),
        "read A's object by version": lambda: s3.get_object(
            Bucket=a, Key="secret.txt", VersionId="null"
        )["Body"].read(),
        "read A's object part": lambda: s3.get_object(
            Bucket=a, Key="secret.txt", PartNumber=1
        )["Body"].read(),
        "A's object attributes": lambda: s3.get_object_attributes(
            Bucket=a, Key="secret.txt", ObjectAttributes=["ETag"]
        ),
        "read A's tags": lambda: s3.get_object_tagging(Bucket=a, Key="secret.txt"),
        "tag A's object": lambda: s3.put_object_tagging(
            Bucket=a, Key="secret.txt", Tagging={"TagSet": []}
        ),
        "delete A's object version": lambda: s3.delete_object(
            Bucket=a, Key="secret.txt", VersionId="null"
        ),
        "A's uploads": lambda: s3.list_multipart_uploads(Bucket=a),
        "read A's bucket policy": lambda: s3.get_bucket_policy(Bucket=a),
        "make A's bucket public": lambda: s3.put_bucket_policy(
            Bucket=a, Policy=json.dumps(public_policy(a))
        ),
        "version A's bucket": lambda: s3.put_bucket_versioning(
            Bucket=a, VersioningConfiguration={"Status": "Enabled"}
        ),
        "copy A's object version out": lambda: s3.copy_object(
            Bucket=own,
            Key="stolen.txt",
            CopySource={"Bucket": a, "Key": "secret.txt", "VersionId": "null"},
        ),
        "part-copy A's object out": lambda: part_copy(s3, own, a),
        "read the platform's tags": lambda: s3.get_object_tagging(
            Bucket="hoard-platform", Key=pkg
        ),
        "read a platform version": lambda: s3.get_object(
            Bucket="hoard-platform", Key=pkg, VersionId="null"
        )["Body"].read(),
    }.items():
        s3_attempt(g, name, f)
    listed = sorted(b["Name"] for b in s3.list_buckets()["Buckets"])
    row(g, "list buckets beyond its own", listed != [own], ", ".join(listed))

    # Its keys, at every other S3 endpoint it knows of.
    quick = Config(connect_timeout=2, read_timeout=2, retries={"max_attempts": 1})
    for what, endpoint in event["endpoints"].items():
        other = boto3.client("s3", endpoint_url="http://" + endpoint, config=quick)
        s3_attempt(
            "S3 with its keys elsewhere",
            "read A's object at " + what,
            lambda: other.get_object(Bucket=a, Key="secret.txt")["Body"].read(),
        )

    # Other processes: the host's pids it was told of, and every process
    # it can see that is not its own.
    mine = {os.getpid()} | set(event.get("children", []))
    seen = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    for what, pid in list(event["host_pids"].items()) + [
        ("pid %d in its namespace" % p, p) for p in seen if p not in mine
    ]:
        for f in ("environ", "cmdline", "fd"):
            if pid in seen and f == "cmdline":
                continue  # its own jail's init: its command line is the jail's (public) spec
            read_attempt(
                "other processes", "%s of %s" % (f, what), "/proc/%d/%s" % (pid, f)
            )
        if pid in seen:
            continue  # its own jail's init: signalling it is no attack
        try:
            os.kill(pid, signal.SIGKILL)
            row("other processes", "kill " + what, True, "%d: signalled" % pid)
        except OSError as e:
            row("other processes", "kill " + what, False, "%d: %s" % (pid, e.strerror))

    for what, p in event["paths"].items():
        read_attempt("files", "read " + what, p)
    write_attempt("files", "write its code", os.path.join(os.getcwd(), "evil.py"))
    write_attempt("files", "write /usr", "/usr/evil")
    write_attempt("files", "write /etc", "/etc/evil")

    for what, addr in event["addrs"].items():
        connect_attempt("connect to " + what, addr)

    fork_bomb(event["forks"])
    orphans(50)
    denied_syscalls(event["syscalls"])

    # What it may do, it can.
    allowed = {}
    try:
        s3.put_object(Bucket=own, Key="mine.txt", Body=b"b's own")
        allowed["own"] = (
            s3.get_object(Bucket=own, Key="mine.txt")["Body"].read().decode()
        )
    except Exception as e:
        allowed["own"] = repr(e)
    try:
        with open("/tmp/attacker", "w") as f:
            f.write("x")
        allowed["tmp"] = "written"
    except OSError as e:
        allowed["tmp"] = repr(e)
    facts = {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "pids": seen,
        "pid": os.getpid(),
        "hostname": socket.gethostname(),
        "cwd": os.getcwd(),
        "endpoint": os.environ.get("AWS_ENDPOINT_URL", ""),
    }
    return {"rows": rows, "allowed": allowed, "facts": facts}
