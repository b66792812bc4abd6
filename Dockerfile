# syntax=docker/dockerfile:1.7
# kshare sidecar image: `docker build -t kshare-sidecar:dev .`
#
#   docker run --rm -p 9192:9192 \
#     -e KSHARE_BOOTSTRAP_SERVERS=kafka:9092 -e KSHARE_ADVERTISED_LISTENER=localhost:9192 \
#     kshare-sidecar:dev
#
# Every setting is an environment variable KSHARE_<KEY_UPPER_WITH_UNDERSCORES> (docs/configuration.md);
# a TOML file can be mounted and named with `sidecar run --config /etc/kshare/kshare.toml`.
# See docs/deployment.md.

ARG PYTHON_IMAGE=python:3.11-slim

# --- build: one wheel for kshare and wheels for its dependencies (no compiler in the final image)
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kshare_sidecar ./kshare_sidecar
RUN pip wheel --wheel-dir /wheels ".[console]"  # the web console's aiohttp too (docs/console.md)

# --- runtime
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kshare-sidecar" \
      org.opencontainers.image.description="Kafka share groups (KIP-932) for clusters without them" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "$(ls /wheels/kshare_sidecar-*.whl)[console]" \
 && groupadd --system --gid 10001 kshare \
 && useradd --system --uid 10001 --gid kshare --home-dir /home/kshare --create-home --shell /usr/sbin/nologin kshare

# Liveness and readiness: a Kafka ApiVersions v0 request to the listener must answer error_code 0.
# Reads the port (and host, 0.0.0.0 meaning loopback) from KSHARE_LISTEN.
COPY --chmod=0755 <<'PY' /usr/local/bin/kshare-healthcheck
#!/usr/local/bin/python
"""Exit 0 when the kshare listener answers a Kafka ApiVersions (v0) request without error."""
import os
import socket
import struct
import sys

listen = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KSHARE_LISTEN", "127.0.0.1:9192")
host, _, port = listen.rpartition(":")
host = host.strip("[]")
if host in ("", "0.0.0.0", "::"):
    host = "127.0.0.1"
try:
    with socket.create_connection((host, int(port)), timeout=3) as sock:
        sock.settimeout(3)
        # size, api_key 18 (ApiVersions), api_version 0, correlation_id, client_id (null)
        sock.sendall(struct.pack(">ihhih", 10, 18, 0, 7, -1))
        head = b""
        while len(head) < 10:
            chunk = sock.recv(10 - len(head))
            if not chunk:
                break
            head += chunk
    size, correlation_id, error_code = struct.unpack(">iih", head)
except (OSError, ValueError, struct.error) as exc:
    print(f"kshare-healthcheck: {listen}: {exc}", file=sys.stderr)
    sys.exit(1)
if correlation_id != 7 or error_code != 0:
    print(f"kshare-healthcheck: {listen}: correlation {correlation_id}, error_code {error_code}", file=sys.stderr)
    sys.exit(1)
PY

USER kshare
WORKDIR /home/kshare
# Inside a container the listener must bind all interfaces; clients are told KSHARE_ADVERTISED_LISTENER.
ENV KSHARE_LISTEN=0.0.0.0:9192
EXPOSE 9192
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["kshare-healthcheck"]
ENTRYPOINT ["kshare"]
CMD ["sidecar", "run"]
