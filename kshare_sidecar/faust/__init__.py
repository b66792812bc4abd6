"""Faust (faust-streaming) on share groups: the ``kshare://`` transport driver.

Registered under the ``faust.transports`` entry point, so ``faust.App("svc",
broker="kshare://sidecar:9192")`` (or ``broker_consumer=`` only) makes stateless agents consume a
share group named by the app id. Importing this package imports Faust; install the ``faust``
extra. Why it lives in the main package (and not under plugins/): it is a thin layer over
``kshare_sidecar.client`` and is tested with the project's own e2e fixtures. See docs/faust.md.
"""

from .transport import Consumer, ShareMessage, Transport

__all__ = ["Consumer", "ShareMessage", "Transport"]
