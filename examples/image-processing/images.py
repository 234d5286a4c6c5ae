"""Image processing on hoard with Pillow.

``thumbnail`` shrinks images into ``thumbnails/`` and ``blur`` blurs them into
``blurred/``; each takes ``{"bucket", "key"}`` or an S3 event
(``{"Records": [...]}``), so ``thumbnail`` runs on the object trigger of
``incoming/``. The pipeline ``process`` runs thumbnail then blur, handing the
thumbnail over through the run's intermediate prefix. ``prepare`` generates
the source images into ``originals/`` (outside the trigger's prefix) and
``upload`` copies them into ``incoming/``, which fires the trigger.

Every function reads ``scale`` (default 1.0): prepare's images are
2048x1536 times sqrt(scale) on each side, and the other functions find the
images prepared at that scale.

``thumbnail`` and ``blur`` return ``"timing"``: the time spent in S3
transfers (``get_object`` with the body read, ``put_object``) and the rest of
the invocation (``compute_ms``: decoding, resizing or blurring, encoding). An
event (or pipeline input) with ``"store": {"endpoint", "access_key",
"secret_key"}`` makes the functions talk to that S3 endpoint directly instead
of the instance's cachelet: the same code without hoard.
"""

from __future__ import annotations

import io
import math
import os
import posixpath
import time
import urllib.parse

import boto3
import numpy as np
from botocore.config import Config
from botocore.exceptions import ClientError
from PIL import Image, ImageFilter

BUCKET = "images"
WIDTH, HEIGHT = 2048, 1536
THUMBNAIL_SIZE = 256
BLUR_RADIUS = 4.0
JPEG_QUALITY = 85

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


def image_size(scale: float) -> tuple[int, int]:
    f = math.sqrt(scale)
    return max(16, round(WIDTH * f)), max(12, round(HEIGHT * f))


def sources(event) -> list[tuple[str, str]]:
    """The (bucket, key) pairs an event names.

    In a pipeline, a stage after another takes the images the earlier stages
    wrote (their results' "outputs"); the first stage reads the run's input.
    Outside, the event itself: {"bucket","key"}, {"bucket","keys"}, an S3
    event's records, or {"image": i} for prepare's image i.
    """
    if event.get("pipeline") is not None:
        earlier = event.get("results") or {}
        wanted = param(event, "from") or sorted(earlier)
        if isinstance(wanted, str):
            wanted = [wanted]
        found = [(o["bucket"], o["key"]) for name in wanted for o in earlier[name].get("outputs", [])]
        if found:
            return found
        event = event.get("input") or {}
    if event.get("Records"):
        return [
            (r["s3"]["bucket"]["name"], urllib.parse.unquote_plus(r["s3"]["object"]["key"])) for r in event["Records"]
        ]
    bucket = event.get("bucket", BUCKET)
    if "keys" in event:
        return [(bucket, k) for k in event["keys"]]
    if "key" in event:
        return [(bucket, event["key"])]
    # No image named: prepare's image "image" (default 0) at the event's scale.
    return [(BUCKET, scaled_key(f"originals/img-{int(event.get('image', 0)):03d}.jpg", scale_of(event)))]


def output_key(event, default_prefix: str, key: str) -> tuple[str | None, str]:
    """Where a function writes its result for a source key (bucket None: the source's).

    An "output_prefix" in the event or the stage's args wins; else a pipeline
    stage writes under the run's intermediate prefix, and a plain invocation
    under default_prefix.
    """
    name = posixpath.basename(key)
    for source in (event, event.get("args")):
        if isinstance(source, dict) and source.get("output_prefix"):
            return source.get("output_bucket"), source["output_prefix"] + name
    pipe = event.get("pipeline")
    if pipe:
        inter = pipe["intermediate"]
        return inter["bucket"], f"{inter['prefix']}{pipe['stage']}/{name}"
    return event.get("output_bucket"), default_prefix + name


def read_image(timing: Timing, bucket: str, key: str) -> Image.Image:
    body = timing.get(bucket, key)
    return Image.open(io.BytesIO(body))  # decoded lazily: thumbnail() can use JPEG draft mode


def write_jpeg(timing: Timing, img: Image.Image, bucket: str, key: str) -> dict:
    out = io.BytesIO()
    img.convert("RGB").save(out, format="JPEG", quality=JPEG_QUALITY)
    body = out.getvalue()
    timing.put(bucket, key, body, "image/jpeg")
    return {"bucket": bucket, "key": key, "width": img.width, "height": img.height, "bytes": len(body)}


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


def make_jpeg(index: int, width: int, height: int) -> bytes:
    """A photo-like JPEG: colour gradients, soft discs and sensor noise (float32, in place)."""
    rng = np.random.default_rng(2000 + index)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :]
    img = np.empty((height, width, 3), dtype=np.float32)
    for c, phase in enumerate(rng.uniform(0, 2 * np.pi, size=3)):
        img[..., c] = 128 + 100 * np.sin(3 * x + 2 * y + np.float32(phase))
    for _ in range(10):
        cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.03, 0.2)
        colour = rng.integers(0, 256, size=3)
        # The disc's bounding box, in pixels (r is a fraction of the height).
        x0, x1 = max(0, int((cx - r * height / width) * width)), min(width, int((cx + r * height / width) * width) + 1)
        y0, y1 = max(0, int((cy - r) * height)), min(height, int((cy + r) * height) + 1)
        if x0 >= x1 or y0 >= y1:
            continue
        dist = np.hypot((x[:, x0:x1] - cx) * (width / height), y[y0:y1] - cy)
        weight = np.clip(1 - dist / r, 0, 1)
        for c in range(3):
            region = img[y0:y1, x0:x1, c]
            region += weight * (colour[c] - region)
    img += rng.standard_normal(size=img.shape, dtype=np.float32) * np.float32(10)
    np.clip(img, 0, 255, out=img)
    out = io.BytesIO()
    Image.fromarray(img.astype(np.uint8)).save(out, format="JPEG", quality=90)
    return out.getvalue()


# ---------------------------------------------------------------- functions


def prepare(event, context=None):
    """Generate the source JPEGs into originals/ (idempotent).

    event: {"scale": 1.0, "count": 4}
    """
    scale = scale_of(event)
    width, height = image_size(scale)
    client = s3(event)
    ensure_bucket(client, BUCKET)
    written, skipped = [], []
    for i in range(int(param(event, "count", 4))):
        key = scaled_key(f"originals/img-{i:03d}.jpg", scale)
        body = make_jpeg(i, width, height)
        if object_size(client, BUCKET, key) == len(body):
            skipped.append(key)
            continue
        client.put_object(Bucket=BUCKET, Key=key, Body=body, ContentType="image/jpeg")
        written.append(key)
    return {"bucket": BUCKET, "width": width, "height": height, "written": written, "skipped": skipped}


def upload(event, context=None):
    """Copy prepared originals into incoming/, which fires the thumbnail trigger.

    event: {"scale": 1.0, "count": 1}
    """
    scale = scale_of(event)
    keys = []
    for i in range(int(param(event, "count", 1))):
        src = scaled_key(f"originals/img-{i:03d}.jpg", scale)
        dst = f"incoming/{posixpath.basename(src)}"
        s3(event).copy_object(Bucket=BUCKET, Key=dst, CopySource={"Bucket": BUCKET, "Key": src})
        keys.append(dst)
    return {"bucket": BUCKET, "keys": keys}


def thumbnail(event, context=None):
    """Shrink images to fit size x size (default 256), into thumbnails/."""
    timing = Timing(s3(event))
    size = int(param(event, "size", THUMBNAIL_SIZE))
    outputs = []
    for bucket, key in sources(event):
        img = read_image(timing, bucket, key)
        img.thumbnail((size, size), Image.Resampling.LANCZOS)
        out_bucket, out_key = output_key(event, "thumbnails/", key)
        outputs.append({"source": key, **write_jpeg(timing, img, out_bucket or bucket, out_key)})
    return {"outputs": outputs, "timing": timing.report()}


def blur(event, context=None):
    """Gaussian-blur images (radius default 4), into blurred/."""
    timing = Timing(s3(event))
    radius = float(param(event, "radius", BLUR_RADIUS))
    outputs = []
    for bucket, key in sources(event):
        img = read_image(timing, bucket, key).convert("RGB").filter(ImageFilter.GaussianBlur(radius))
        out_bucket, out_key = output_key(event, "blurred/", key)
        outputs.append({"source": key, **write_jpeg(timing, img, out_bucket or bucket, out_key)})
    return {"outputs": outputs, "timing": timing.report()}
