"""What fusec's Python tools share that needs no torch (so that `python3 -m fusec.export --help`
and its argument errors work where torch is missing, and scripts/make_tokens.py needs only the
standard library): the one-line error convention of a command line and the atomic writing of
a set of files."""
import argparse
import contextlib
import errno
import os
import secrets
import sys
import traceback


class OneLineError(Exception):
    """A failure whose message is already the one line to print (cli() prints it as it is)."""


class ExportError(OneLineError):
    """An export that cannot be done faithfully."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's usage text and exit 2 become cli()'s one line and exit 1
        raise OneLineError(message)


def cli(name, parser, run, argv=None):
    """Parses argv with `parser` (a Parser) and calls run(args). Returns the exit status: 0, or 1
    after printing `NAME: error: <one line>` to stderr on any failure whatever (a bad flag, an
    OSError, a model's exception, sys.exit or Ctrl-C), never a traceback unless args.debug.
    --help's own exit passes through."""
    args = None
    try:
        args = parser.parse_args(argv)
        run(args)
        return 0
    except BaseException as e:
        if isinstance(e, SystemExit) and e.code in (0, None) and args is None:
            raise  # --help
        if getattr(args, "debug", False):
            traceback.print_exc()
        text = str(e) if isinstance(e, OneLineError) else describe(e)
        print(f"{name}: error: {' '.join(text.split())}", file=sys.stderr)  # one line whatever the message
        return 1


def describe(e, source_file=None):
    """One line for any exception: its type and message and, where code in `source_file` (a
    user's model) raised it, directly or through torch, that file's last line on the way."""
    if isinstance(e, SystemExit):
        text = f"sys.exit({e.code!r}) was called"
    elif isinstance(e, KeyboardInterrupt):
        text = "interrupted"
    else:
        text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    if source_file:
        mine = [fr for fr in traceback.extract_tb(e.__traceback__)
                if os.path.abspath(fr.filename) == os.path.abspath(source_file)]
        if mine:
            text += f" ({os.path.basename(source_file)}:{mine[-1].lineno}: {(mine[-1].line or '').strip()})"
    text = " ".join(text.split())  # torch's messages span lines
    return text if len(text) <= 600 else text[:597] + "..."


def write_files(directory, files, check=None):
    """Writes `files`, [(name, write(binary file))], into `directory` (created if missing) as a
    set: each goes first to a hidden temporary in `directory` (`.NAME.tmp.*`, so the rename
    stays on one filesystem and is atomic), is synced, and only when every one is written, and
    `check` (if given: the exporter's check of what it wrote), called with {name: temporary's
    path}, has returned, are they renamed into place, in the order given. Where there are
    several, the last one marks a complete set (model.fir for an export): its old copy is
    removed before the first rename and the new one renamed last, so a set interrupted between
    renames has no marker rather than a marker beside another set's files. On any failure
    every temporary is removed (and the directories this call created, where empty) and the
    exception goes on."""
    # Refused before anything is written, in the words of the failing call (makedirs would say
    # "File exists" of a file in the directory's place; the rename, a temporary's name).
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), directory)
    for name, _ in files:
        if os.path.isdir(os.path.join(directory, name)):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.path.join(directory, name))
    made, d = [], os.path.abspath(directory)  # the directories this call creates, to remove on failure
    while not os.path.lexists(d):
        made.append(d)
        d = os.path.dirname(d)
    if made:
        os.makedirs(directory)
    tmps = []
    try:
        for name, write in files:
            tmps.append(os.path.join(directory, f".{name}.tmp.{os.getpid()}.{secrets.token_hex(4)}"))
            with open(tmps[-1], "xb") as f:  # "x": never another writer's file; mode 0666 & ~umask
                write(f)
                f.flush()
                os.fsync(f.fileno())
        if check is not None:
            check({name: tmp for (name, _), tmp in zip(files, tmps)})
        if len(files) > 1 and os.path.lexists(os.path.join(directory, files[-1][0])):
            os.unlink(os.path.join(directory, files[-1][0]))
        for (name, _), tmp in zip(files, tmps):
            os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        for tmp in tmps:
            with contextlib.suppress(OSError):  # renamed already (or cannot be: the first error matters)
                os.unlink(tmp)
        for d in made:  # deepest first; one that is not empty holds another writer's files and stays
            with contextlib.suppress(OSError):
                os.rmdir(d)
        raise
