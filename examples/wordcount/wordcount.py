"""MapReduce word count on hoard.

The pipeline ``wordcount``: ``split`` cuts a text corpus into N chunks at word
boundaries, the ``map`` stages (one function, ``{"part": i}`` in each stage's
args) count the words of one chunk each, and ``reduce`` merges the partial
counts into ``s3://wordcount/output/<run id>.json`` and returns the top 10.
Chunks and partial counts go under the run's intermediate prefix.

``prepare`` generates the corpus: random words of a fixed 5,000-word
vocabulary drawn with Zipf frequencies, about 20 MB at scale 1.0
(``{"scale": s}`` makes it s times that). ``count`` counts a corpus in one
invocation, for comparison.

A word is a maximal run of the letters a-z after lower-casing.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections import Counter

import boto3
import numpy as np
from botocore.exceptions import ClientError

BUCKET = "wordcount"
CORPUS_KEY = "corpus/corpus.txt"
CORPUS_BYTES = 20_000_000
VOCABULARY = 5000
ZIPF_EXPONENT = 1.07
WORDS_PER_LINE = 12
DEFAULT_PARTS = 4

# bytes -> bytes table: A-Z to a-z, everything that is not a letter to a space.
_LETTERS = bytes(range(ord("a"), ord("z") + 1))
_TABLE = bytes(c + 32 if ord("A") <= c <= ord("Z") else c if c in _LETTERS else ord(" ") for c in range(256))

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


def corpus_source(event) -> tuple[str, str]:
    """The corpus: an S3 event record, {"bucket","key"}, or the prepared corpus."""
    for source in (event, event.get("input")):
        if isinstance(source, dict) and source.get("Records"):
            obj = source["Records"][0]["s3"]
            return obj["bucket"]["name"], urllib.parse.unquote_plus(obj["object"]["key"])
    return param(event, "bucket", BUCKET), param(event, "key") or scaled_key(CORPUS_KEY, scale_of(event))


def intermediate(event) -> tuple[str, str]:
    pipe = event.get("pipeline")
    if pipe:
        return pipe["intermediate"]["bucket"], pipe["intermediate"]["prefix"]
    return BUCKET, f"tmp/manual-{time.time_ns()}/"


def run_id(event) -> str:
    pipe = event.get("pipeline")
    return pipe["run_id"] if pipe else f"manual-{time.time_ns()}"


def get(bucket: str, key: str) -> bytes:
    return s3().get_object(Bucket=bucket, Key=key)["Body"].read()


def put(bucket: str, key: str, body: bytes, content_type: str) -> None:
    s3().put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type)


def count_words(text: bytes) -> Counter:
    return Counter(text.translate(_TABLE).split())


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


def vocabulary() -> list[str]:
    """5,000 distinct pronounceable words, the same every time."""
    rng = np.random.default_rng(7)
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "br"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st"]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < VOCABULARY:
        syllables = int(rng.choice([1, 2, 3, 4], p=[0.25, 0.4, 0.25, 0.1]))
        word = "".join(
            onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))] + codas[rng.integers(len(codas))]
            for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def make_corpus(scale: float) -> bytes:
    """Lines of WORDS_PER_LINE Zipf-distributed words: "Word word ... word.\\n"."""
    words = vocabulary()
    weights = 1.0 / np.arange(1, len(words) + 1) ** ZIPF_EXPONENT
    p = weights / weights.sum()
    mean_bytes = float(p @ np.array([len(w) + 1 for w in words]))  # a word and its separator
    n_lines = max(1, round(CORPUS_BYTES * scale / mean_bytes / WORDS_PER_LINE))
    rng = np.random.default_rng(42)
    picks = rng.choice(len(words), size=(n_lines, WORDS_PER_LINE), p=p)
    lines = []
    for row in picks.tolist():
        line = " ".join(words[i] for i in row)
        lines.append(line[0].upper() + line[1:] + ".")
    return ("\n".join(lines) + "\n").encode()


# ---------------------------------------------------------------- functions


def prepare(event, context=None):
    """Generate the corpus (about 20 MB x scale) into the bucket (idempotent)."""
    scale = scale_of(event)
    key = scaled_key(CORPUS_KEY, scale)
    body = make_corpus(scale)
    ensure_bucket(BUCKET)
    if object_size(BUCKET, key) == len(body):
        return {"bucket": BUCKET, "key": key, "bytes": len(body), "written": False}
    put(BUCKET, key, body, "text/plain")
    return {"bucket": BUCKET, "key": key, "bytes": len(body), "written": True}


def split(event, context=None):
    """Cut the corpus into "parts" chunks at whitespace, under the intermediate prefix."""
    parts = int(param(event, "parts", DEFAULT_PARTS))
    bucket, key = corpus_source(event)
    text = get(bucket, key)
    out_bucket, prefix = intermediate(event)
    bounds = [0]
    for i in range(1, parts):
        pos = max(bounds[-1], len(text) * i // parts)
        while pos < len(text) and not text[pos : pos + 1].isspace():
            pos += 1
        bounds.append(pos)
    bounds.append(len(text))
    chunks = []
    for i in range(parts):
        chunk_key = f"{prefix}chunks/part-{i:03d}.txt"
        put(out_bucket, chunk_key, text[bounds[i] : bounds[i + 1]], "text/plain")
        chunks.append(chunk_key)
    return {"corpus": {"bucket": bucket, "key": key}, "bytes": len(text), "bucket": out_bucket, "chunks": chunks}


def map_words(event, context=None):
    """Count the words of chunk "part" of the split stage; partial counts as JSON."""
    part = int(param(event, "part", 0))
    found = (event.get("results") or {}).get(param(event, "split_stage", "split")) or param(event, "split")
    if not found:
        raise ValueError("map needs the split stage's result (event results.split or split)")
    counts = count_words(get(found["bucket"], found["chunks"][part]))
    out_bucket, prefix = intermediate(event)
    key = f"{prefix}counts/part-{part:03d}.json"
    body = json.dumps({w.decode(): c for w, c in counts.items()}, sort_keys=True).encode()
    put(out_bucket, key, body, "application/json")
    return {"part": part, "bucket": out_bucket, "counts": key, "words": sum(counts.values()), "distinct": len(counts)}


def _final(counts: Counter, bucket: str, key: str) -> dict:
    body = {"words": sum(counts.values()), "distinct": len(counts), "counts": dict(sorted(counts.items()))}
    put(bucket, key, json.dumps(body).encode(), "application/json")
    return {
        "output": {"bucket": bucket, "key": key},
        "words": body["words"],
        "distinct": body["distinct"],
        "top": [[w, c] for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[:10]],
    }


def reduce_counts(event, context=None):
    """Merge the map stages' partial counts into output/<run id>.json; return the top 10."""
    total: Counter = Counter()
    parts = [r for r in (event.get("results") or {}).values() if isinstance(r, dict) and "counts" in r]
    if not parts:
        raise ValueError("reduce needs the map stages' results (event results)")
    for r in sorted(parts, key=lambda r: r["part"]):
        total.update(json.loads(get(r["bucket"], r["counts"])))
    bucket = param(event, "output_bucket", BUCKET)
    return _final(total, bucket, f"output/{run_id(event)}.json")


def count(event, context=None):
    """The whole word count in one invocation, into output/<id>.json."""
    bucket, key = corpus_source(event)
    counts = Counter({w.decode(): c for w, c in count_words(get(bucket, key)).items()})
    return _final(counts, param(event, "output_bucket", BUCKET), f"output/{run_id(event)}.json")
