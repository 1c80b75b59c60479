"""The validation's findings: one line each, counted (see validate_manifests.py)."""

import os


class Report:
    """Prints `ok`, `FAIL` and `note` lines and counts passes and failures."""

    def __init__(self, quiet=False):
        self.failures = 0
        self.passes = 0
        self.quiet = quiet

    def ok(self, what):
        self.passes += 1
        if not self.quiet:
            print(f"ok    {what}")

    def fail(self, what):
        self.failures += 1
        print(f"FAIL  {what}")

    def note(self, what):
        print(f"note  {what}")

    def check(self, cond, what):
        (self.ok if cond else self.fail)(what)
        return cond

    def errors(self, errors, what):
        """ok when errors is empty, else one FAIL line per error."""
        for e in errors:
            self.fail(f"{what}: {e}")
        if not errors:
            self.ok(what)
        return not errors

    def totals(self):
        return f"validate_manifests: {self.passes} passed, {self.failures} failed"


def rel(repo, path):
    return os.path.relpath(path, repo)


def name_of(doc):
    return doc.get("metadata", {}).get("name", "?")
