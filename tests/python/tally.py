"""The python tests' tally: `check` prints each check as it goes and keeps the failed ones;
`exit_code` prints the count and gives the test's exit status (1 when any check failed)."""

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def exit_code():
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0
