#!/usr/bin/env python3
"""Checks that the source tree's #include graph runs one way, from higher layers to lower:

    ir  <-  passes  <-  codegen, runtime  <-  api  <-  frontend, bench  <-  tools

A file in one layer may include its own layer's headers and those of any lower layer, never a
higher one's. Only project includes ("dir/file.h" with a layer directory) are checked; system
and third-party headers are not. tests/ and examples/ sit above everything and are not checked.

Usage: check_layers.py ROOT. Prints one line per wrong include (file:line: what, and the rule)
and exits 1 if there is any, else prints a summary and exits 0. The lit test
tests/lit/layers/layers.test runs it on the tree and on a tree with a planted wrong include.
"""
import os
import re
import sys

LAYERS = {"ir": 0, "passes": 1, "codegen": 2, "runtime": 2, "api": 3, "frontend": 4, "bench": 4, "tools": 5}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')
SOURCES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".inc")


def main(argv):
    if len(argv) != 2:
        print("usage: check_layers.py ROOT", file=sys.stderr)
        return 2
    root = argv[1]
    if not os.path.isdir(root):
        print(f"check_layers: {root} is not a directory", file=sys.stderr)
        return 2
    wrong, files = [], 0
    for layer, rank in sorted(LAYERS.items()):
        top = os.path.join(root, layer)
        for dirpath, _, names in os.walk(top):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                files += 1
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) not in LAYERS:
                            continue
                        target = f"{m.group(1)}/{m.group(2)}"
                        if LAYERS[m.group(1)] <= rank:
                            continue
                        wrong.append(f"{rel}:{number}: includes {target}: layer '{layer}' may not include "
                                     f"layer '{m.group(1)}' (ir <- passes <- codegen, runtime <- api <- frontend, bench <- tools)")
    for w in wrong:
        print(w)
    if wrong:
        return 1
    print(f"check_layers: {files} files, includes run one way")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
