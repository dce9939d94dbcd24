#!/usr/bin/env python3
"""Writes a flat token file for `fusec run --data` (CS336's np.memmap format: the tokens one
after another, uint16 or int32, little-endian, no header). Standard library only, with
fusec's torch-free frontend/python/fusec/common.py: the file appears complete or not at all
(its directory created as needed), and any failure is one line, `make_tokens.py: error: ...`,
and exit 1.

  python3 scripts/make_tokens.py --text README.md docs/*.md --out data/docs.u16
      the files' bytes as tokens 0..255 (a byte-level corpus; any model with vocab >= 256)
  python3 scripts/make_tokens.py --pattern 100000 --vocab 37 --out data/pattern.u16
      a sequence a model can learn: a seeded random permutation p of the vocabulary, each
      token followed by p(token), a fresh random token every 64 (the loss falls towards
      about ln(vocab) / 64)
"""
import argparse
import array
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frontend", "python"))
from fusec.common import OneLineError, Parser, cli, write_files  # noqa: E402


def main():
    return cli("make_tokens.py", parser(), make)


def parser():
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", nargs="+", metavar="FILE", help="files whose bytes are the tokens")
    src.add_argument("--pattern", type=int, metavar="N", help="N tokens of the learnable pattern")
    ap.add_argument("--vocab", type=int, help="--pattern: the vocabulary size")
    ap.add_argument("--seed", type=int, default=0, help="--pattern: the seed (default 0)")
    ap.add_argument("--dtype", choices=["uint16", "int32"], default="uint16")
    ap.add_argument("--out", required=True)
    return ap


def make(a):
    if a.text:
        tokens = []
        for path in a.text:
            with open(path, "rb") as f:
                tokens.extend(f.read())
    else:
        if not a.vocab or a.vocab < 2 or a.pattern < 1:
            raise OneLineError("--pattern needs N >= 1 and --vocab >= 2")
        if a.dtype == "uint16" and a.vocab > 65536:
            raise OneLineError("--vocab above 65536 needs --dtype int32")
        rng = random.Random(a.seed)
        perm = list(range(a.vocab))
        rng.shuffle(perm)
        tokens, t = [], rng.randrange(a.vocab)
        for i in range(a.pattern):
            t = rng.randrange(a.vocab) if i % 64 == 0 else perm[t]
            tokens.append(t)
    out = array.array("H" if a.dtype == "uint16" else "i", tokens)
    if sys.byteorder != "little":
        out.byteswap()
    write_files(os.path.dirname(a.out) or ".", [(os.path.basename(a.out), out.tofile)])  # data/ need not exist
    print(f"{a.out}: {len(tokens)} {a.dtype} tokens")


if __name__ == "__main__":
    sys.exit(main())
