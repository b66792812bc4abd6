"""Project-wide test settings. The real-broker fixtures come from kshare_sidecar.testing."""

# Hypothesis imports its optimiser lazily, the first time a test's generation reaches that phase,
# deep inside the test's stack. Under pytest that import is compiled by the assertion rewriter,
# and CPython 3.11.7 (this machine's and CI's Python) can fail such a compile with "SystemError:
# AST constructor recursion depth mismatch" (a CPython 3.11 bug in that check, python/cpython
# issue 106905): seen once, in tests/unit/api/test_sasl_gate.py during a full run. Importing it
# here compiles it at the top of the stack, before any test runs.
import hypothesis.internal.conjecture.optimiser  # noqa: E402,F401
