#!/usr/bin/env python3
"""Renders the texts the 4-bit accuracy measurement needs from this machine's manual pages and docs,
with launch/train/build_corpus.py's own rendering, filters and split (standard library + groff):

  heldout.jsonl  every document whose name hashes into the held-out split (never trained on)
  calib.jsonl    --calib documents of the training split (chosen by a hash of the name), the
                 calibration data of AutoAWQ's search

One JSON object per line: {"name": ..., "text": ...}. Rendering only these (about 1% of the pages)
takes a minute instead of the whole corpus' quarter hour. The held-out documents present here may
differ from the training machine's; the split is by name, so none of them was trained on.

Usage: python3 tools/w4a16/eval_corpus.py --out /tmp/w4eval [--calib 64]
"""
import argparse
import json
import os
import sys
from multiprocessing import Pool

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch", "train"))

import build_corpus as bc  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    items = [it for it in bc.man_pages() + bc.doc_files() if bc.keep(it[1])]
    heldout = [it for it in items if bc.is_heldout(it[1], 1.0)]
    train = sorted((it for it in items if not bc.is_heldout(it[1], 1.0)), key=lambda it: bc.name_hash(it[1], "calib"))
    os.makedirs(args.out, exist_ok=True)
    with Pool(args.jobs) as pool:
        for split, chosen, want in (("heldout", heldout, len(heldout)), ("calib", train, args.calib)):
            rows, seen = [], set()
            for r in pool.imap(bc.work, chosen[: want * 2 if split == "calib" else want], chunksize=4):
                if r is None or r[1] in seen:
                    continue
                seen.add(r[1])
                rows.append(r)
                if len(rows) >= want:
                    break
            rows.sort()
            with open(os.path.join(args.out, split + ".jsonl"), "w") as f:
                for name, text in rows:
                    f.write(json.dumps({"name": name, "text": text}, ensure_ascii=False) + "\n")
            print("%s: %d documents, %d bytes" % (split, len(rows), sum(len(t.encode()) for _, t in rows)))


if __name__ == "__main__":
    main()
