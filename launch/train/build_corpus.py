#!/usr/bin/env python3
"""Builds the training corpus of the default model from text that exists offline on a Debian
machine: the English manual pages under /usr/share/man (rendered to plain text with groff) and the
plain-text documentation under /usr/share/doc (README files, *.txt, *.md, *.rst).

Standard library only (plus the `groff` program). Deterministic: the same machine gives the same
corpus byte for byte (documents are sorted by name; the held-out split is a hash of the name).

Output (in --out, default .device/corpus/):
  train.jsonl.xz    one JSON object per document: {"name": ..., "text": ...}
  heldout.jsonl.xz  the same, for the documents whose name hashes into the held-out split
  stats.json        counts and sizes

Usage:
  python3 launch/train/build_corpus.py --out .device/corpus [--jobs N] [--limit N]
  python3 launch/train/build_corpus.py --from-corpus OLD --out NEW   (re-filter only)
"""
import argparse
import bz2
import gzip
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
import time
from multiprocessing import Pool

MAN_ROOT = "/usr/share/man"
DOC_ROOT = "/usr/share/doc"

# groff preamble: left-adjusted (no justification spaces), no hyphenation; pages that ask for
# either get a no-op, so words are never split across lines and never padded with extra spaces.
PREAMBLE = ".ad l\n.nh\n.de ad\n..\n.de hy\n..\n"

# Typographic characters groff -Tutf8 emits, mapped to the ASCII a user would type.
TRANSLATE = str.maketrans({
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "--", "\u2212": "-",
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2033": '"',
    "\u2022": "*", "\u00b7": "*", "\u2026": "...", "\u00a0": " ", "\u2002": " ", "\u2003": " ",
    "\u2009": " ", "\u200b": "", "\u00ad": "", "\u27e8": "<", "\u27e9": ">", "\u2329": "<",
    "\u232a": ">", "\u00d7": "x", "\ufeff": "",
})
OVERSTRIKE = re.compile(r".\x08")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
BLANKS = re.compile(r"\n{3,}")
DOC_NAME = re.compile(r"^(readme.*|.*\.(txt|md|rst|text))(\.gz|\.xz|\.bz2)?$", re.IGNORECASE)


def read_maybe_compressed(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    elif path.endswith(".xz") or path.endswith(".lzma"):
        data = lzma.decompress(data)
    elif path.endswith(".bz2"):
        data = bz2.decompress(data)
    return data


def clean(text):
    text = ANSI.sub("", text)
    while "\x08" in text:
        new = OVERSTRIKE.sub("", text)
        if new == text:
            text = text.replace("\x08", "")
            break
        text = new
    text = text.translate(TRANSLATE)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "        ")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = BLANKS.sub("\n\n", text)
    return text.strip("\n") + "\n"


def is_english_text(text):
    """Rejects binary-ish or non-Latin documents: at least 97% of characters must be ASCII."""
    if len(text) < 200:
        return False
    ascii_chars = sum(1 for c in text if ord(c) < 128)
    return ascii_chars >= 0.97 * len(text)


def render_man(path):
    try:
        src = read_maybe_compressed(path)
    except Exception:
        return None
    head = src.lstrip()[:200]
    if head.startswith(b".so ") or head.startswith(b"'so "):
        return None  # an alias of another page
    try:
        proc = subprocess.run(
            ["groff", "-mandoc", "-Tutf8", "-P-cbou", "-rLL=80n", "-t", "-k"],
            input=PREAMBLE.encode() + src, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            timeout=60, cwd=os.path.dirname(os.path.dirname(path)),
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "GROFF_SGR": "", "MANWIDTH": "80"})
    except (subprocess.TimeoutExpired, OSError):
        return None
    if proc.returncode != 0:
        return None
    return clean(proc.stdout.decode("utf-8", "replace"))


def read_doc(path):
    try:
        data = read_maybe_compressed(path)
    except Exception:
        return None
    if b"\x00" in data[:4096]:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return clean(text)


def work(item):
    kind, name, path = item
    text = render_man(path) if kind == "man" else read_doc(path)
    if text is None or not is_english_text(text):
        return None
    return name, text


def man_pages():
    seen = set()
    out = []
    for section in sorted(os.listdir(MAN_ROOT)):
        # English pages only: man1..man9 (translations live under /usr/share/man/<lang>/).
        if not re.fullmatch(r"man[1-9n]", section):
            continue
        d = os.path.join(MAN_ROOT, section)
        for fn in sorted(os.listdir(d)):
            path = os.path.join(d, fn)
            real = os.path.realpath(path)
            if real in seen or not os.path.isfile(real):
                continue
            seen.add(real)
            out.append(("man", f"man/{section}/{fn}", real))
    return out


def doc_files():
    seen = set()
    out = []
    for root, dirs, files in os.walk(DOC_ROOT):
        dirs.sort()
        for fn in sorted(files):
            if not DOC_NAME.match(fn):
                continue
            path = os.path.join(root, fn)
            real = os.path.realpath(path)
            if real in seen or not os.path.isfile(real):
                continue
            size = os.path.getsize(real)
            if size < 300 or size > 2_000_000:
                continue
            seen.add(real)
            out.append(("doc", "doc/" + os.path.relpath(path, DOC_ROOT), real))
    return out


# Changelogs, release notes and data tables are not prose; skip them.
SKIP_NAME = re.compile(r"(changelog|/news|/history|/status\.txt|/changes)", re.IGNORECASE)
# Google Cloud SDK pages (gcloud, bq, gsutil: ~16,000 near-identical generated pages, over half the
# text when google-cloud-cli is installed) are kept at this fraction, chosen by a hash of the name.
GCLOUD_NAME = re.compile(r"^man/man1/(gcloud|bq|gsutil)[_.]")
GCLOUD_KEEP = 0.25


def name_hash(name, salt=""):
    return int.from_bytes(hashlib.sha256((salt + name).encode()).digest()[:8], "big")


def keep(name):
    if SKIP_NAME.search(name):
        return False
    if GCLOUD_NAME.match(name):
        return name_hash(name, "gcloud") % 10000 < GCLOUD_KEEP * 10000
    return True


def is_heldout(name, percent):
    return name_hash(name) % 10000 < percent * 100


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".device/corpus")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--heldout-percent", type=float, default=1.0)
    ap.add_argument("--limit", type=int, default=0, help="only the first N sources (for testing)")
    ap.add_argument("--no-docs", action="store_true", help="manual pages only")
    ap.add_argument("--from-corpus", help="re-filter and re-split an earlier output folder instead of rendering")
    args = ap.parse_args()

    t0 = time.time()
    results = []
    if args.from_corpus:
        for split in ("train", "heldout"):
            with lzma.open(os.path.join(args.from_corpus, f"{split}.jsonl.xz"), "rt", encoding="utf-8") as f:
                results += [(r["name"], r["text"]) for r in map(json.loads, f)]
        items = results
    else:
        items = [it for it in man_pages() + ([] if args.no_docs else doc_files()) if keep(it[1])]
        if args.limit:
            items = items[: args.limit]
        print(f"{len(items)} sources, {args.jobs} jobs", file=sys.stderr)
        with Pool(args.jobs) as pool:
            for i, r in enumerate(pool.imap(work, items, chunksize=16)):
                if r is not None:
                    results.append(r)
                if (i + 1) % 1000 == 0:
                    print(f"  {i + 1}/{len(items)} ({time.time() - t0:.0f}s)", file=sys.stderr)
    results = [r for r in results if keep(r[0])]

    # Exact-duplicate removal on the rendered text (the same page installed under two names).
    results.sort()
    seen = set()
    docs = []
    for name, text in results:
        h = hashlib.sha256(text.encode()).digest()
        if h in seen:
            continue
        seen.add(h)
        docs.append((name, text))

    os.makedirs(args.out, exist_ok=True)
    stats = {"sources": len(items), "documents": len(docs), "train": {}, "heldout": {}}
    splits = {"train": [], "heldout": []}
    for name, text in docs:
        splits["heldout" if is_heldout(name, args.heldout_percent) else "train"].append((name, text))
    for split, rows in splits.items():
        payload = "".join(json.dumps({"name": n, "text": t}, ensure_ascii=False) + "\n" for n, t in rows)
        with lzma.open(os.path.join(args.out, f"{split}.jsonl.xz"), "wb", preset=9) as f:
            f.write(payload.encode())
        stats[split] = {"documents": len(rows), "bytes": sum(len(t.encode()) for _, t in rows),
                        "man": sum(1 for n, _ in rows if n.startswith("man/")),
                        "doc": sum(1 for n, _ in rows if n.startswith("doc/"))}
    stats["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=2)
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
