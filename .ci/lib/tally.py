"""The CI checkers' count of checks passed and failed, and their last line.

Standard library only.
"""


class Tally:
    """`check(ok, what)` counts one check and prints a failure (every check, with
    `verbose`); `summary()` prints "NAME: N passed, N failed" and returns the exit code."""

    def __init__(self, name, verbose=False):
        self.name = name
        self.verbose = verbose
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
            if self.verbose:
                print(f"  ok: {what}")
        else:
            self.failed += 1
            print(f"  FAIL: {what}" if self.verbose else f"FAIL: {what}")
        return ok

    def summary(self):
        print(f"{self.name}: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
