"""Video processing on hoard: split, transcode in parallel, merge.

CacheFlow's video workflow (after Alibaba Cloud's Function Compute example,
which runs ffmpeg): ``split`` cuts a video into clips, the ``transcode``
stages (one function, ``{"clip": i}`` in each stage's args) convert one clip
each, in parallel, and ``merge`` concatenates the converted clips into
``s3://videos/output/<run id>.i420.npy``. Clips and converted clips go under
the run's intermediate prefix.

There is no ffmpeg here: a "video" is raw RGB frames, a uint8 array of shape
(frames, height, width, 3) saved with numpy (``.npy``), and transcoding is
numpy arithmetic: RGB to YUV 4:2:0 (BT.601, full range; the planar I420
layout of raw video files, one row of Y, U and V planes per frame),
optionally downscaled first (``"downscale": 2`` halves width and height).
A converted clip is half the bytes of its source at the same size.

``prepare`` generates the video: 160 frames of 240x320 (36.9 MB) at scale
1.0; ``{"scale": s}`` keeps the frame size and makes s times the frames.

Every function returns ``"timing"``: the time spent in S3 transfers
(``get_object`` with the body read, ``put_object``) and the rest of the
invocation (``compute_ms``), so a pipeline's data-transfer time can be
summed per stage. An event (or pipeline input) with ``"store": {"endpoint",
"access_key", "secret_key"}`` makes the functions talk to that S3 endpoint
directly instead of the instance's cachelet: the same code without hoard.
"""

from __future__ import annotations

import io
import os
import time
import urllib.parse

import boto3
import numpy as np
from botocore.config import Config
from botocore.exceptions import ClientError

BUCKET = "videos"
SOURCE_KEY = "source/video.npy"
FRAMES, HEIGHT, WIDTH = 160, 240, 320
DEFAULT_CLIPS = 4

_clients: dict[tuple, object] = {}


def s3(event=None):
    """boto3's S3 client: the instance's cachelet (the platform sets AWS_ENDPOINT_URL), or the event's "store"."""
    store = param(event, "store") if isinstance(event, dict) else None
    if store:
        ident = (store["endpoint"], store["access_key"])
        if ident not in _clients:
            _clients[ident] = boto3.client(
                "s3",
                endpoint_url=store["endpoint"],
                aws_access_key_id=store["access_key"],
                aws_secret_access_key=store["secret_key"],
                config=Config(s3={"addressing_style": "path"}),
            )
        return _clients[ident]
    ident = (os.environ.get("AWS_ENDPOINT_URL", ""),)
    if ident not in _clients:
        _clients[ident] = boto3.client("s3")
    return _clients[ident]


class Timing:
    """Where an invocation's time goes: S3 transfers (the bodies read and sent included) and the rest."""

    def __init__(self, client):
        self.client = client
        self.started = time.perf_counter()
        self.get_s = self.put_s = 0.0
        self.gets = self.puts = self.get_bytes = self.put_bytes = 0

    def get(self, bucket: str, key: str) -> bytes:
        t = time.perf_counter()
        body = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        self.get_s += time.perf_counter() - t
        self.gets += 1
        self.get_bytes += len(body)
        return body

    def put(self, bucket: str, key: str, body: bytes, content_type: str) -> None:
        t = time.perf_counter()
        self.client.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type)
        self.put_s += time.perf_counter() - t
        self.puts += 1
        self.put_bytes += len(body)

    def report(self) -> dict:
        total = time.perf_counter() - self.started
        transfer = self.get_s + self.put_s
        return {
            "transfer_ms": transfer * 1e3,
            "get_ms": self.get_s * 1e3,
            "put_ms": self.put_s * 1e3,
            "compute_ms": max(0.0, total - transfer) * 1e3,
            "total_ms": total * 1e3,
            "gets": self.gets,
            "puts": self.puts,
            "get_bytes": self.get_bytes,
            "put_bytes": self.put_bytes,
        }


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


def frame_count(scale: float) -> int:
    return max(DEFAULT_CLIPS, round(FRAMES * scale))


def video_source(event) -> tuple[str, str]:
    """The video: an S3 event record, {"bucket","key"}, or the prepared video."""
    for source in (event, event.get("input")):
        if isinstance(source, dict) and source.get("Records"):
            obj = source["Records"][0]["s3"]
            return obj["bucket"]["name"], urllib.parse.unquote_plus(obj["object"]["key"])
    return param(event, "bucket", BUCKET), param(event, "key") or scaled_key(SOURCE_KEY, scale_of(event))


def intermediate(event) -> tuple[str, str]:
    pipe = event.get("pipeline")
    if pipe:
        return pipe["intermediate"]["bucket"], pipe["intermediate"]["prefix"]
    return BUCKET, f"tmp/manual-{time.time_ns()}/"


def run_id(event) -> str:
    pipe = event.get("pipeline")
    return pipe["run_id"] if pipe else f"manual-{time.time_ns()}"


def to_npy(a: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, a, allow_pickle=False)
    return out.getvalue()


def from_npy(body: bytes) -> np.ndarray:
    """A .npy object as an array over its bytes (read-only, no copy)."""
    f = io.BytesIO(body)
    major, _ = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    return np.frombuffer(body, dtype=dtype, offset=f.tell()).reshape(shape, order="F" if fortran else "C")


def make_video(frames: int, height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
    """Frames of a slowly shifting colour gradient, a bright disc moving across, and sensor noise."""
    rng = np.random.default_rng(11)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :]
    phases = rng.uniform(0, 2 * np.pi, size=3).astype(np.float32)
    out = np.empty((frames, height, width, 3), dtype=np.uint8)
    frame = np.empty((height, width, 3), dtype=np.float32)
    for t in range(frames):
        shift = np.float32(2 * np.pi * t / 96)
        for c in range(3):
            frame[..., c] = 128 + 90 * np.sin(4 * x + 3 * y + phases[c] + shift)
        cx, cy = 0.1 + 0.8 * (t % 80) / 80, 0.5 + 0.3 * np.sin(t / 13)
        disc = np.clip(1 - np.hypot((x - cx) * (width / height), y - cy) / 0.15, 0, 1)
        frame += disc[..., None] * (np.array([250, 230, 60], dtype=np.float32) - frame)
        frame += rng.standard_normal(size=frame.shape, dtype=np.float32) * np.float32(6)
        np.clip(frame, 0, 255, out=frame)
        out[t] = frame.astype(np.uint8)
    return out


def rgb_to_i420(frames: np.ndarray, downscale: int = 1) -> np.ndarray:
    """RGB frames (t, h, w, 3) to I420 rows (t, h*w*3/2): Y, then U and V at half width and height."""
    t, h, w, _ = frames.shape
    f = int(downscale)
    if f < 1 or h % (2 * f) or w % (2 * f):
        raise ValueError(f"cannot downscale {w}x{h} by {f} and subsample its chroma")
    rgb = frames.astype(np.float32)
    if f > 1:
        rgb = rgb.reshape(t, h // f, f, w // f, f, 3).mean(axis=(2, 4))
        h, w = h // f, w // f
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = -0.168736 * r - 0.331264 * g + 0.5 * b + 128
    v = 0.5 * r - 0.418688 * g - 0.081312 * b + 128

    def half(p):
        return p.reshape(t, h // 2, 2, w // 2, 2).mean(axis=(2, 4))

    planes = [y, half(u), half(v)]
    out = np.concatenate([np.clip(np.rint(p), 0, 255).astype(np.uint8).reshape(t, -1) for p in planes], axis=1)
    return out


def ensure_bucket(client, bucket: str) -> None:
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("404", "NoSuchBucket", "NotFound"):
            raise
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as exc2:
            if exc2.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
                raise


def object_size(client, bucket: str, key: str) -> int | None:
    try:
        return client.head_object(Bucket=bucket, Key=key)["ContentLength"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


# ---------------------------------------------------------------- functions


def prepare(event, context=None):
    """Generate the video (160 frames of 240x320 x scale) into source/ (idempotent)."""
    scale = scale_of(event)
    client = s3(event)
    key = scaled_key(SOURCE_KEY, scale)
    frames = frame_count(scale)
    ensure_bucket(client, BUCKET)
    body = to_npy(make_video(frames))
    written = object_size(client, BUCKET, key) != len(body)
    if written:
        client.put_object(Bucket=BUCKET, Key=key, Body=body, ContentType="application/octet-stream")
    return {
        "bucket": BUCKET,
        "key": key,
        "frames": frames,
        "height": HEIGHT,
        "width": WIDTH,
        "bytes": len(body),
        "written": written,
    }


def split(event, context=None):
    """Cut the video into "clips" clips of whole frames, under the intermediate prefix."""
    timing = Timing(s3(event))
    clips = int(param(event, "clips", DEFAULT_CLIPS))
    bucket, key = video_source(event)
    video = from_npy(timing.get(bucket, key))
    if video.ndim != 4 or video.shape[3] != 3 or video.dtype != np.uint8:
        raise ValueError(f"{key}: not RGB frames (shape {video.shape}, {video.dtype})")
    if not 1 <= clips <= video.shape[0]:
        raise ValueError(f"cannot cut {video.shape[0]} frames into {clips} clips")
    out_bucket, prefix = intermediate(event)
    bounds = [video.shape[0] * i // clips for i in range(clips + 1)]
    keys = []
    for i in range(clips):
        clip_key = f"{prefix}clips/clip-{i:03d}.npy"
        timing.put(out_bucket, clip_key, to_npy(video[bounds[i] : bounds[i + 1]]), "application/octet-stream")
        keys.append(clip_key)
    return {
        "source": {"bucket": bucket, "key": key},
        "frames": int(video.shape[0]),
        "height": int(video.shape[1]),
        "width": int(video.shape[2]),
        "bucket": out_bucket,
        "clips": keys,
        "timing": timing.report(),
    }


def transcode(event, context=None):
    """Convert clip "clip" of the split stage to I420 ("downscale" 1 by default)."""
    timing = Timing(s3(event))
    clip = int(param(event, "clip", 0))
    found = (event.get("results") or {}).get(param(event, "split_stage", "split")) or param(event, "split")
    if not found:
        raise ValueError("transcode needs the split stage's result (event results.split or split)")
    frames = from_npy(timing.get(found["bucket"], found["clips"][clip]))
    downscale = int(param(event, "downscale", 1))
    out = rgb_to_i420(frames, downscale)
    out_bucket, prefix = intermediate(event)
    key = f"{prefix}transcoded/clip-{clip:03d}.i420.npy"
    timing.put(out_bucket, key, to_npy(out), "application/octet-stream")
    return {
        "clip": clip,
        "bucket": out_bucket,
        "key": key,
        "frames": int(frames.shape[0]),
        "height": int(frames.shape[1]) // downscale,
        "width": int(frames.shape[2]) // downscale,
        "timing": timing.report(),
    }


def merge(event, context=None):
    """Concatenate the transcoded clips, in order, into output/<run id>.i420.npy."""
    timing = Timing(s3(event))
    parts = [r for r in (event.get("results") or {}).values() if isinstance(r, dict) and "clip" in r and "key" in r]
    if not parts:
        raise ValueError("merge needs the transcode stages' results (event results)")
    parts.sort(key=lambda r: r["clip"])
    if [r["clip"] for r in parts] != list(range(len(parts))):
        raise ValueError(f"clips {[r['clip'] for r in parts]} are not 0..{len(parts) - 1}")
    video = np.concatenate([from_npy(timing.get(r["bucket"], r["key"])) for r in parts], axis=0)
    bucket = param(event, "output_bucket", BUCKET)
    key = f"output/{run_id(event)}.i420.npy"
    timing.put(bucket, key, to_npy(video), "application/octet-stream")
    return {
        "output": {"bucket": bucket, "key": key},
        "clips": len(parts),
        "frames": int(video.shape[0]),
        "height": parts[0]["height"],
        "width": parts[0]["width"],
        "bytes": int(video.nbytes),
        "timing": timing.report(),
    }
