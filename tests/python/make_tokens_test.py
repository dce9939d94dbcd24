"""scripts/make_tokens.py, the README's token-file command, on a fresh clone:
  - --out in a directory that does not exist yet (data/ is not in the repository) writes the
    file, creating the directory; --pattern's tokens are below --vocab, --text's are the bytes;
  - any failure (a bad flag, a missing --text file, an --out that is a directory or under a
    file, a full disk) is one stderr line `make_tokens.py: error: ...`, exit 1, no traceback,
    and leaves no temporary, no directory it created, and any previous file as it was.

    python3 tests/python/make_tokens_test.py
Standard library only, like the script."""
import array
import os
import resource
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "make_tokens.py")
sys.path.insert(0, HERE)
from tally import check, exit_code  # noqa: E402


def make_tokens(*args, file_limit=None):
    """file_limit: RLIMIT_FSIZE in bytes, a write past it failing as on a full disk (EFBIG;
    python ignores SIGXFSZ)."""
    limit = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))) if file_limit else None
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit)


def one_line_error(r):
    lines = r.stderr.strip().splitlines()
    return r.returncode == 1 and len(lines) == 1 and lines[0].startswith("make_tokens.py: error: ")


def tokens(path):
    t = array.array("H")
    with open(path, "rb") as f:
        t.frombytes(f.read())
    if sys.byteorder != "little":
        t.byteswap()
    return t


def writes(tmp):
    out = os.path.join(tmp, "data", "sub", "pattern.u16")
    r = make_tokens("--pattern", "1000", "--vocab", "37", "--out", out)
    t = tokens(out) if os.path.isfile(out) else []
    check(r.returncode == 0 and len(t) == 1000 and max(t) < 37 and sorted(os.listdir(os.path.dirname(out))) ==
          ["pattern.u16"], f"--pattern into a directory not there yet: written, 1000 tokens below 37, nothing else "
          f"(rc {r.returncode}, {r.stderr.strip()[-300:]})")
    text = os.path.join(tmp, "text.txt")
    with open(text, "wb") as f:
        f.write(b"fusec\xff")
    out = os.path.join(tmp, "text.u16")
    r = make_tokens("--text", text, "--out", out)
    check(r.returncode == 0 and os.path.isfile(out) and list(tokens(out)) == list(b"fusec\xff"),
          f"--text: the file's bytes as tokens ({r.stderr.strip()[-300:]})")


def failures(tmp):
    d = os.path.join(tmp, "fail")
    os.mkdir(d)
    a_file = os.path.join(d, "a_file")
    open(a_file, "w").close()
    cases = [("--pattern abc", ["--pattern", "abc", "--out", os.path.join(d, "x.u16")], "--pattern"),
             ("--pattern without --vocab", ["--pattern", "10", "--out", os.path.join(d, "x.u16")], "--vocab"),
             ("no --out", ["--pattern", "10", "--vocab", "5"], "--out"),
             ("a missing --text file", ["--text", os.path.join(d, "nosuch"), "--out", os.path.join(d, "x.u16")],
              "nosuch"),
             ("an --out that is a directory", ["--pattern", "10", "--vocab", "5", "--out", d], "Is a directory"),
             ("an --out under a file", ["--pattern", "10", "--vocab", "5", "--out", os.path.join(a_file, "x.u16")],
              "a_file")]
    for what, args, says in cases:
        r = make_tokens(*args)
        check(one_line_error(r) and says in r.stderr and sorted(os.listdir(d)) == ["a_file"],
              f"{what}: one line, exit 1, nothing written (rc {r.returncode}: {r.stderr.strip()[-300:]})")
    # A full disk: the previous file stays as it was, with no temporary beside it.
    out = os.path.join(d, "a_file")
    with open(out, "wb") as f:
        f.write(b"previous")
    r = make_tokens("--pattern", "100000", "--vocab", "37", "--out", out, file_limit=16384)
    check(one_line_error(r) and open(out, "rb").read() == b"previous" and os.listdir(d) == ["a_file"],
          f"a full disk: one line, exit 1, the previous file as it was, no temporary ({r.stderr.strip()[-300:]})")
    r = make_tokens("--pattern", "100000", "--vocab", "37", "--out", os.path.join(d, "new", "sub", "x.u16"),
                    file_limit=16384)
    check(one_line_error(r) and os.listdir(d) == ["a_file"],
          f"a full disk, --out in new directories: one line, exit 1, no directory left ({r.stderr.strip()[-300:]})")
    r = make_tokens("--help")
    check(r.returncode == 0 and "--pattern" in r.stdout, "--help: exit 0 and the flags")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        writes(tmp)
        failures(tmp)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
