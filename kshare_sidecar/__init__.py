"""kshare: Kafka share groups (KIP-932) for every cluster, served by a sidecar."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kshare-sidecar")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

from kshare_sidecar.hookspecs import hookimpl  # noqa: E402  (plugin authors: from kshare_sidecar import hookimpl)

__all__ = ["__version__", "hookimpl"]
