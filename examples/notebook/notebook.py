"""A notebook on hoard: cells that sum a 350 MB column.

The column is 10 float64 chunks of 35 MB (``column/chunk-NN.npy``, generated
by ``prepare``). Each cell is one invocation of ``cell`` with ``{"cell": n}``;
the notebook's state (every cell's result) lives in a small JSON object,
``state/<session>.json``, which each cell reads and updates, as a notebook
kernel's variables would be kept by a stateless function:

1. list the column's chunks;
2. sum them (reads the 350 MB);
3. compute the mean from cells 1 and 2.

``{"scale": s}`` makes the chunks s times as big (the chunk count stays).
"""

from __future__ import annotations

import io
import json
import math
import os

import boto3
import numpy as np
from botocore.exceptions import ClientError

BUCKET = "notebook"
COLUMN_PREFIX = "column/"
CHUNKS = 10
CHUNK_BYTES = 35_000_000

_clients: dict[str, object] = {}


def s3():
    """boto3's S3 client; the platform points it at the instance's cachelet."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if endpoint not in _clients:
        _clients[endpoint] = boto3.client("s3")
    return _clients[endpoint]


def param(event, name, default=None):
    """A parameter from the event, else the stage's args, else the pipeline's input."""
    for source in (event, event.get("args"), event.get("input")):
        if isinstance(source, dict) and name in source:
            return source[name]
    return default


def scale_of(event) -> float:
    scale = float(param(event, "scale", 1.0))
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], not {scale}")
    return scale


def scaled_key(key: str, scale: float) -> str:
    """The key of an object generated at a scale: the full size has the plain key."""
    return key if scale == 1 else f"x{scale:g}/{key}"


def get_bytes(bucket: str, key: str) -> bytearray:
    """An object's body in one preallocated buffer."""
    resp = s3().get_object(Bucket=bucket, Key=key)
    size = resp["ContentLength"]
    buf = bytearray(size)
    pos = 0
    for chunk in resp["Body"].iter_chunks(1 << 20):
        buf[pos : pos + len(chunk)] = chunk
        pos += len(chunk)
    if pos != size:
        raise OSError(f"s3://{bucket}/{key}: read {pos} of {size} bytes")
    return buf


def npy_header(shape: tuple[int, ...], dtype) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    )
    return f.getvalue()


def load_npy(buf) -> np.ndarray:
    """A view of the array in an .npy buffer (no copy)."""
    f = io.BytesIO(memoryview(buf)[:65536])
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    if fortran:
        raise ValueError("Fortran-ordered arrays are not supported")
    return np.frombuffer(buf, dtype=dtype, count=math.prod(shape), offset=f.tell()).reshape(shape)


def ensure_bucket(bucket: str) -> None:
    try:
        s3().head_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("404", "NoSuchBucket", "NotFound"):
            raise
        try:
            s3().create_bucket(Bucket=bucket)
        except ClientError as exc2:
            if exc2.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
                raise


def object_size(bucket: str, key: str) -> int | None:
    try:
        return s3().head_object(Bucket=bucket, Key=key)["ContentLength"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def chunk_key(i: int, scale: float) -> str:
    return scaled_key(f"{COLUMN_PREFIX}chunk-{i:02d}.npy", scale)


def chunk_values(scale: float) -> int:
    return max(1, int(CHUNK_BYTES * scale) // 8)


def make_chunk(i: int, scale: float) -> bytearray:
    """The .npy bytes of chunk i: float64 prices, log-normal around 100."""
    n = chunk_values(scale)
    header = npy_header((n,), "<f8")
    buf = bytearray(len(header) + 8 * n)
    buf[: len(header)] = header
    values = np.frombuffer(buf, dtype="<f8", offset=len(header))
    rng = np.random.default_rng(3000 + i)
    rng.standard_normal(out=values)
    values *= 0.25
    values += math.log(100)
    np.exp(values, out=values)
    return buf


def state_key(event) -> str:
    session = str(param(event, "session", "default"))
    if not session or "/" in session:
        raise ValueError(f"bad session name {session!r}")
    return f"state/{session}.json"


def load_state(key: str) -> dict:
    try:
        return json.loads(s3().get_object(Bucket=BUCKET, Key=key)["Body"].read())
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return {"cells": {}}
        raise


def need(state: dict, cell: int) -> dict:
    try:
        return state["cells"][str(cell)]
    except KeyError:
        raise ValueError(f"run cell {cell} first") from None


# ---------------------------------------------------------------- cells


def cell_1(state: dict, scale: float) -> dict:
    """List the column's chunks."""
    prefix = scaled_key(COLUMN_PREFIX, scale)
    chunks = []
    for page in s3().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".npy") and "/" not in obj["Key"][len(prefix) :]:
                chunks.append({"key": obj["Key"], "bytes": obj["Size"]})
    if not chunks:
        raise ValueError(f"no chunks under s3://{BUCKET}/{prefix}: run prepare first")
    return {"bucket": BUCKET, "chunks": chunks, "bytes": sum(c["bytes"] for c in chunks)}


def cell_2(state: dict, scale: float) -> dict:
    """Sum the column, chunk by chunk."""
    listing = need(state, 1)
    partials, count = [], 0
    for c in listing["chunks"]:
        values = load_npy(get_bytes(listing["bucket"], c["key"]))
        partials.append(float(values.sum()))
        count += values.size
    return {"sum": math.fsum(partials), "count": count, "partials": partials}


def cell_3(state: dict, scale: float) -> dict:
    """The mean, from cell 2's sum and count."""
    total = need(state, 2)
    return {"mean": total["sum"] / total["count"]}


CELLS = {1: cell_1, 2: cell_2, 3: cell_3}


# ---------------------------------------------------------------- functions


def prepare(event, context=None):
    """Generate the column: "chunks" (10) float64 chunks of 35 MB x scale (idempotent)."""
    scale = scale_of(event)
    n = chunk_values(scale)
    size = len(npy_header((n,), "<f8")) + 8 * n
    ensure_bucket(BUCKET)
    written, skipped = [], []
    for i in range(int(param(event, "chunks", CHUNKS))):
        key = chunk_key(i, scale)
        if object_size(BUCKET, key) == size:
            skipped.append(key)
            continue
        s3().put_object(Bucket=BUCKET, Key=key, Body=make_chunk(i, scale))
        written.append(key)
    return {"bucket": BUCKET, "chunk_bytes": size, "written": written, "skipped": skipped}


def cell(event, context=None):
    """Run one cell: {"cell": 1|2|3, "session": "default", "scale": 1.0}; {"reset": true} clears the state."""
    key = state_key(event)
    if param(event, "reset"):
        s3().delete_object(Bucket=BUCKET, Key=key)
        return {"state": {"bucket": BUCKET, "key": key}, "reset": True}
    n = int(param(event, "cell", 0))
    if n not in CELLS:
        raise ValueError(f"no cell {n}; cells are {sorted(CELLS)}")
    state = load_state(key)
    result = CELLS[n](state, scale_of(event))
    state["cells"][str(n)] = result
    for later in [c for c in state["cells"] if int(c) > n]:
        del state["cells"][later]  # a re-run cell invalidates the cells after it
    s3().put_object(Bucket=BUCKET, Key=key, Body=json.dumps(state).encode(), ContentType="application/json")
    return {"cell": n, "result": result, "state": {"bucket": BUCKET, "key": key}}
