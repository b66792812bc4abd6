"""Project-wide test settings. The real-broker fixtures come from kshare_sidecar.testing."""

# Hypothesis imports its optimiser lazily, the first time a test's generation reaches that phase,
# deep inside the test's stack. Under pytest that import is compiled by the assertion rewriter,
# and CPython 3.11.7 (this machine's and CI's Python) can fail such a compile with "SystemError:
# AST constructor recursion depth mismatch" (a CPython 3.11 bug in that check, python/cpython
# issue 106905): seen once, in tests/unit/api/test_sasl_gate.py during a full run. Importing it
# here compiles it at the top of the stack, before any test runs.
import hypothesis.internal.conjecture.optimiser  # noqa: E402,F401

import pytest  # noqa: E402

# Opt-in suites (nemesis, soak, backend matrix, containers, console browser runs, ...) are marked
# ``@pytest.mark.optin("NAME")`` and run only when asked for with ``--run NAME`` (``--run all`` for
# every one); each has a `make test-NAME` target. One switch, a marker, instead of an environment
# variable per suite.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run", action="append", default=[], metavar="NAME",
                     help="also run the opt-in tests marked optin(NAME); 'all' runs every one")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = set(config.getoption("--run"))
    for item in items:
        marker = item.get_closest_marker("optin")
        if marker is None:
            continue
        name = marker.args[0]
        if not chosen & {name, "all"}:
            item.add_marker(pytest.mark.skip(reason=f"opt-in suite {name!r}: run with `make test-{name}` "
                                                    f"(pytest --run {name})"))
