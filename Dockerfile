# kshare sidecar image: `docker build -t kshare-sidecar:dev .`
#
#   docker run --rm -p 9192:9192 \
#     -e KSHARE_BOOTSTRAP_SERVERS=kafka:9092 -e KSHARE_ADVERTISED_LISTENER=localhost:9192 \
#     kshare-sidecar:dev
#
# Every setting is an environment variable KSHARE_<KEY_UPPER_WITH_UNDERSCORES> (docs/configuration.md);
# a TOML file can be mounted and named with `sidecar run --config /etc/kshare/kshare.toml`.
# See docs/deployment.md.
#
# Builds with BuildKit and with the classic builder alike (no `# syntax=` line, heredoc or RUN --mount):
# the classic builder needs no registry, so the image also builds where none is reachable, on any
# base with Python 3.11, `python3 -m venv`, groupadd and useradd
# (`docker build --build-arg PYTHON_IMAGE=kshare-local/python:3.11 .`; docs/testing.md, "Containers").

ARG PYTHON_IMAGE=python:3.11-slim

# --- build: kshare and its dependencies in a virtual environment (no compiler in the final image)
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python3 -m venv /opt/kshare
COPY pyproject.toml README.md ./
COPY kshare_sidecar ./kshare_sidecar
# compiled once here, so that a container starts without compiling (and the user cannot write there)
# with the web console's aiohttp (the `console` extra, docs/console.md)
RUN /opt/kshare/bin/pip install .[console] && /opt/kshare/bin/python -m compileall -q /opt/kshare/lib

# --- runtime
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kshare-sidecar" \
      org.opencontainers.image.description="Kafka share groups (KIP-932) for clusters without them" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/kshare/bin:$PATH
COPY --from=build /opt/kshare /opt/kshare
# Liveness and readiness: a Kafka ApiVersions v0 request to the listener must answer error_code 0.
COPY images/kshare-healthcheck /usr/local/bin/kshare-healthcheck
RUN chmod 0755 /usr/local/bin/kshare-healthcheck \
 && groupadd --system --gid 10001 kshare \
 && useradd --system --uid 10001 --gid kshare --home-dir /home/kshare --create-home --shell /usr/sbin/nologin kshare

USER kshare
WORKDIR /home/kshare
# Inside a container the listener must bind all interfaces; clients are told KSHARE_ADVERTISED_LISTENER.
ENV KSHARE_LISTEN=0.0.0.0:9192
EXPOSE 9192
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["kshare-healthcheck"]
ENTRYPOINT ["kshare"]
CMD ["sidecar", "run"]
