"""Faust (faust-streaming) on share groups: the ``kshare://`` transport driver.

Registered under the ``faust.transports`` entry point, so ``faust.App("svc",
broker="kshare://sidecar:9192")`` (or ``broker_consumer=`` only) makes stateless agents consume a
share group named by the app id. Why it lives in the main package (and not under plugins/): it is a
thin layer over ``kshare_sidecar.client``, tested with the project's own e2e fixtures, and a
separate distribution would only add a release to keep in step. See docs/faust.md.

The names below import Faust on first use (install the ``faust`` extra); ``.acking``, the rule
itself, imports no Faust.
"""

from typing import Any

__all__ = ["Consumer", "ShareMessage", "Transport", "release_on_error"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import transport

        return getattr(transport, name)
    raise AttributeError(name)
