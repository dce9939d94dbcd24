#!/usr/bin/env python3
"""The README's commands, run as a newcomer runs them (issue 44: they are the front door).

Every fenced ```sh block of README.md that follows a line `<!-- readme-test -->` is run line
by line from the repository's root, in order, with `build/fusec` standing for the binary under
test (--fusec) and the set-up steps that the test command itself has done (scripts/bootstrap,
scripts/build, scripts/test) left out of `&&` chains. Each command must exit 0; a block that
stops failing is the README telling the truth again. Outputs go where the README says (data/
is ignored by git); the files a block makes are removed afterwards. The exporter's commands
need PyTorch: where `import torch` fails they are skipped with the reason (as the other
torch-based tests are).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

SETUP = ("scripts/bootstrap", "scripts/build", "scripts/test")


def blocks(readme):
    lines = open(readme).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "<!-- readme-test -->":
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            k = j + 1
            body = []
            while k < len(lines) and not lines[k].startswith("```"):
                body.append(lines[k])
                k += 1
            out.append((i + 1, body))
            i = k
        i += 1
    return out


def commands(body, fusec):
    for line in body:
        line = re.sub(r"\s+#.*$", "", line).strip()  # a trailing comment
        if not line:
            continue
        parts = [p.strip() for p in line.split("&&")]
        parts = [p for p in parts if not p.startswith(SETUP)]
        if not parts:
            continue
        yield " && ".join(p.replace("build/fusec", shlex.quote(fusec), 1) if p.startswith("build/fusec") else p for p in parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--python", default=sys.executable,
                    help="the python3 the README's commands get (its directory first on PATH): one with torch if any")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    found = blocks(os.path.join(root, "README.md"))
    if not found:
        print("FAIL: README.md has no <!-- readme-test --> block")
        return 1
    failures = 0
    made = []
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(a.python)) + os.pathsep + env.get("PATH", "")
    env["FUSEC_BIN"] = os.path.abspath(a.fusec)  # the binary under test checks the exports too (fusec/verify.py)
    has_torch = subprocess.run(["python3", "-c", "import torch"], capture_output=True, env=env).returncode == 0
    for line_no, body in found:
        skipped = None
        for cmd in commands(body, os.path.abspath(a.fusec)):
            if skipped or ("fusec.export" in cmd and not has_torch):
                skipped = skipped or "no PyTorch: python3 -c 'import torch' fails"
                print(f"skip README.md:{line_no}: `{cmd}` ({skipped}; the block's later lines need it)")
                continue
            for out in re.findall(r"--out\s+(\S+)", cmd):
                made.append(os.path.join(root, out))
            t0 = time.time()
            r = subprocess.run(cmd, shell=True, cwd=root, capture_output=True, text=True, env=env)
            took = time.time() - t0
            if r.returncode != 0:
                failures += 1
                print(f"FAIL README.md:{line_no}: `{cmd}` exited {r.returncode} after {took:.1f} s:")
                print("\n".join((r.stdout + r.stderr).strip().split("\n")[-8:]))
            else:
                print(f"ok   README.md:{line_no}: `{cmd}` ({took:.1f} s)")
                # The README's claim about this run: "tiny's loss falls ... to below 3.6".
                losses = [float(x) for x in re.findall(r"^step \d+/\d+\s+loss (\S+)", r.stdout, re.M)]
                if "--model tiny" in cmd and "--data" in cmd and losses and not losses[-1] < 3.6:
                    failures += 1
                    print(f"FAIL README.md:{line_no}: tiny's last loss is {losses[-1]}, the README says below 3.6")
    for f in made:
        if os.path.isfile(f):
            os.remove(f)
        elif os.path.isdir(f) and f.startswith("/tmp/"):
            shutil.rmtree(f, ignore_errors=True)
    print(f"{failures} of the README's commands failed" if failures else "every README command tested ran")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
