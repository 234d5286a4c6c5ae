"""The "Differences from the store" list of docs/s3-api.md, made from
python/tests/s3_differences.json: one row per reason (a case's reason may
join several with "; "), with the cases it explains and where they differ.

Run it to rewrite the list in place after changing the JSON:

    .venv/bin/python python/tests/s3_differences_doc.py

test_differential.py checks that the list in the docs is the one this
makes (``generated()`` against ``documented()``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JSON_FILE = ROOT / "python" / "tests" / "s3_differences.json"
DOC_FILE = ROOT / "docs" / "s3-api.md"
BEGIN = "<!-- differences: made by python/tests/s3_differences_doc.py from python/tests/s3_differences.json -->"
END = "<!-- end of differences -->"


def _places(entry: dict) -> str:
    where = list(entry.get("where", ["one/minio", "one/versitygw", "owner/minio"]))
    some = [f"{p}, in some runs" for p in entry.get("intermittent", []) if p not in where]
    return ", ".join(where + some)


def generated(raw: dict | None = None) -> str:
    """The list, as Markdown, between its markers."""
    raw = json.loads(JSON_FILE.read_text()) if raw is None else raw
    by_reason: dict[str, list[str]] = {}
    for case_id in sorted(raw):
        entry = raw[case_id]
        for reason in entry["reason"].split("; "):
            by_reason.setdefault(reason, []).append(f"`{case_id}` ({_places(entry)})")
    rows = sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    lines = [BEGIN, "", "| reason | cases (where: setup/store) |", "|---|---|"]
    for reason, cases in rows:
        cell = reason.replace("|", "\\|")
        lines.append(f"| {cell} | {', '.join(cases)} |")
    lines += ["", f"{len(raw)} cases differ, for {len(rows)} reasons.", "", END]
    return "\n".join(lines)


def documented(doc: str | None = None) -> str:
    """The list as docs/s3-api.md has it, markers included ("" if none)."""
    doc = DOC_FILE.read_text() if doc is None else doc
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        return ""
    return doc[start : end + len(END)]


def main() -> int:
    doc = DOC_FILE.read_text()
    old = documented(doc)
    if not old:
        print(f"{DOC_FILE} lacks the markers {BEGIN!r} and {END!r}", file=sys.stderr)
        return 1
    DOC_FILE.write_text(doc.replace(old, generated()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
