"""Harness errors: one line that names the problem and the fix, never a traceback for users."""


class HarnessError(RuntimeError):
    """A broker could not be provided; `str(err)` is a single actionable line."""
