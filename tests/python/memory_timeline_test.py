"""`fusec compile --memory-timeline FILE.svg|FILE.json`, checked against the planned IR.

For each program below, the SVG parses as XML, and its boxes are the planned values: one
box per top-level value the printed IR gives an arena offset (`@N` on a result of anything
but a param or input), with that offset and with the live range worked out here from the
IR's uses (not fusec's liveness). Then a second check of memory-plan, from the picture
alone: no two boxes that overlap in time overlap in address. The JSON holds the same values
as the SVG.

Usage: memory_timeline_test.py --fusec PATH/TO/fusec
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"

PROGRAMS = [
    ["--model", "tiny", "--program", "train_step"],
    ["--model", "tiny", "--program", "forward", "--dtype", "bf16"],
    ["--model", "small", "--program", "train_step", "--dtype", "bf16", "--batch", "8"],
]


def top_level_statements(fir):
    """The function's top-level statements, each joined with its wrapped continuation lines
    (the printer indents a function's ops by 2 and their continuations by 6; kernel bodies
    by 4 and 8)."""
    out = []
    for line in fir.splitlines():
        if line.startswith("      ") and not line.startswith("       ") and out:
            out[-1] += " " + line.strip()
        elif line.startswith("  %") and not line.startswith("   "):
            out.append(line.strip())
    return out


VIEWS = ("reshape", "permute", "slice", "broadcast", "concat")


def plan_from_ir(fir):
    """What the printed IR says of its planned values, computed here, apart from fusec's own
    liveness: name -> (arena offset, position of the op that writes it, position of its last
    use). A value is planned when it has an `@offset` and is not a param or input; a view
    without one reads its first operand's storage (so its uses are that root's); a returned
    value lives to the end; a step-invariant value (made from constants alone: an op, other
    than a param or input, whose operands are all such values) lives from the start to the
    end, since it is computed at a program's first call only."""
    planned, root, invariant = {}, {}, set()
    statements = top_level_statements(fir)
    for pos, st in enumerate(statements):
        lhs, _, rhs = st.partition(" = ")
        kind = rhs.split("(", 1)[0]
        names = [n.strip() for n in lhs.split(",")]
        operands = re.findall(r"%[\w.]+", rhs.split("(", 1)[1].split(")", 1)[0]) if "(" in rhs else []
        # The result types follow the last " : " before a kernel's body; each planned one ends
        # in "@offset".
        types = rhs.rstrip(" {").rsplit(" : ", 1)[1]
        parts = re.split(r",\s(?=[a-z0-9]+\[)", types)
        assert len(parts) == len(names), (st, parts)
        if kind not in ("param", "input") and all(o in invariant for o in operands):
            invariant.update(names)
        for name, t in zip(names, parts):
            m = re.search(r"\s@(\d+)$", t.strip())
            if kind not in ("param", "input") and m:
                planned[name] = [int(m.group(1)), pos, pos]
            elif kind in VIEWS and not m and operands:
                root[name] = root.get(operands[0], operands[0])
        for o in operands:
            r = root.get(o, o)
            if r in planned:
                planned[r][2] = max(planned[r][2], pos)
    end = len(statements)
    for line in fir.splitlines():
        if line.startswith("  return "):
            for o in re.findall(r"%[\w.]+", line):
                r = root.get(o, o)
                if r in planned:
                    planned[r][2] = end
    for n in invariant & planned.keys():
        planned[n][1], planned[n][2] = 0, end
    return {n: tuple(v) for n, v in planned.items()}


def check(fusec, args, tmp):
    svg_path, json_path = os.path.join(tmp, "t.svg"), os.path.join(tmp, "t.json")
    fir = subprocess.run([fusec, "compile", *args, "--memory-timeline", svg_path, "--memory-timeline", json_path],
                         check=True, capture_output=True, text=True).stdout
    planned = plan_from_ir(fir)
    root = ET.parse(svg_path).getroot()  # parses as XML
    boxes = [r for r in root.iter(SVG + "rect") if r.get("class") == "value"]
    what = " ".join(args)
    assert len(boxes) == len(planned), f"{what}: {len(boxes)} boxes, {len(planned)} planned values"
    spans = []
    for r in boxes:
        name, off = r.get("data-name"), int(r.get("data-offset"))
        live = (off, int(r.get("data-def")), int(r.get("data-last")))
        assert planned.get(name) == live, f"{what}: box {name} at (offset, def, last) {live}, the IR says {planned.get(name)}"
        assert r.find(SVG + "title") is not None and name in r.find(SVG + "title").text
        spans.append((int(r.get("data-def")), int(r.get("data-last")), off, off + int(r.get("data-bytes")), name))
    # No two boxes live at the same time share a byte (a sweep over time, by start).
    spans.sort()
    for i, (d0, l0, a0, b0, n0) in enumerate(spans):
        for d1, l1, a1, b1, n1 in spans[i + 1:]:
            if d1 > l0:
                break
            assert b0 <= a1 or b1 <= a0, f"{what}: {n0} [{a0},{b0}) and {n1} [{a1},{b1}) overlap at op {d1}"
    data = json.load(open(json_path))
    assert sorted((v["name"], v["offset"]) for v in data["values"]) == sorted((n, p[0]) for n, p in planned.items()), what
    assert data["peak"]["live_bytes"] <= data["arena_bytes"], what
    kinds = {v["kind"] for v in data["values"]}
    if "train_step" in args:
        assert {"saved", "gradient"} <= kinds, (what, kinds)
    print(f"ok: {what}: {len(boxes)} boxes, no overlap; kinds {sorted(kinds)}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fusec", required=True)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for args in PROGRAMS:
            check(a.fusec, args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
