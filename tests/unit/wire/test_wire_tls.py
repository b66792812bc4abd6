"""TLS on a listener, on 127.0.0.1: a TLS client is served and its certificate reaches the
connection; a plaintext client is one WARNING line and a closed socket; a listener stopping
while a handshake is pending ends at once. Certificates come from openssl (as the e2e CA)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import subprocess
import time
import uuid

import pytest

from kshare_sidecar.api import Dispatcher, InMemoryTopicCatalog, NodeIdentity, build_registry
from kshare_sidecar.api.sasl import ListenerHandler
from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.testing.maven import require_tool
from kshare_sidecar.wire import Listener

from .test_wire_limits import API_VERSIONS, answered, closed

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")
    d = tmp_path_factory.mktemp("pki")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=t-ca", "-keyout", "ca.key",
        "-out", "ca.pem")
    for name, subject in (("server", "/CN=localhost"), ("client", "/O=t/CN=unit-client")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key", "-out", f"{name}.csr")
        (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
            "-extfile", "san.ext", "-out", f"{name}.pem")
    return d


def server_context(pki, verify=ssl.CERT_REQUIRED) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "server.pem", pki / "server.key")
    ctx.load_verify_locations(pki / "ca.pem")
    ctx.verify_mode = verify
    return ctx


async def tls_listener(pki, context: ssl.SSLContext | None = None, **kwargs) -> Listener:
    dispatcher = Dispatcher(build_registry(InMemoryTopicCatalog([TopicInfo("t", uuid.uuid4(), 1)])),
                            NodeIdentity(1, "127.0.0.1", 0))
    lst = Listener(ListenerHandler(dispatcher, listener="SSL"), "127.0.0.1", 0, name="SSL", security_protocol="SSL",
                   ssl_context=context or server_context(pki), **kwargs)
    await lst.start()
    return lst


async def test_a_tls_client_with_a_certificate_is_served_with_its_principal(pki):
    lst = await tls_listener(pki)
    try:
        client = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        client.load_cert_chain(pki / "client.pem", pki / "client.key")
        reader, writer = await asyncio.open_connection("127.0.0.1", lst.port, ssl=client)
        assert await answered(reader, writer)
        (conn,) = lst.connections.values()
        assert conn.security_protocol == "SSL" and conn.principal == "User:CN=unit-client,O=t"
        writer.close()
    finally:
        await lst.stop()


async def test_plaintext_to_the_tls_port_is_one_line_and_a_closed_socket(pki, caplog):
    lst = await tls_listener(pki)
    try:
        with caplog.at_level(logging.WARNING, logger="kshare.wire"):
            reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
            writer.write(API_VERSIONS)
            assert await closed(reader)
            writer.close()
            await asyncio.sleep(0.1)
        lines = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
        assert len(lines) == 1 and "to listener SSL" in lines[0], lines
        assert "Traceback" not in caplog.text and not lst.connections
    finally:
        await lst.stop()


async def test_stopping_while_a_handshake_is_pending_ends_at_once(pki):
    lst = await tls_listener(pki)
    reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)  # never sends a ClientHello
    await asyncio.sleep(0.1)
    started = time.monotonic()
    await lst.stop(grace=0.5)
    assert time.monotonic() - started < 3
    assert await closed(reader)
    writer.close()


@pytest.mark.parametrize("certificate,alert,reason", [
    (False, "CERTIFICATE_REQUIRED", "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
    (True, "UNKNOWN_CA", "CERTIFICATE_VERIFY_FAILED"),  # signed by a CA the listener does not trust
])
async def test_a_refused_client_certificate_reaches_the_client_as_the_alert(pki, tmp_path, caplog, certificate,
                                                                            alert, reason):
    """auth/tls.py's AlertFirst (the listeners' sslobject_class): the client reads OpenSSL's alert
    — asyncio alone closes without sending it — and the one log line keeps the refusal's reason."""
    from kshare_sidecar.auth.tls import AlertFirst

    context = server_context(pki)
    context.sslobject_class = AlertFirst
    lst = await tls_listener(pki, context)
    client = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if certificate:
        def run(*args):
            subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True, timeout=60)
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other-ca", "-keyout",
            "other.key", "-out", "other.pem")
        client.load_cert_chain(tmp_path / "other.pem", tmp_path / "other.key")
    try:
        with caplog.at_level(logging.WARNING, logger="kshare.wire"):
            reader, writer = await asyncio.open_connection("127.0.0.1", lst.port, ssl=client)
            writer.write(API_VERSIONS)
            with pytest.raises(ssl.SSLError) as info:
                await asyncio.wait_for(reader.read(100), 10)
            writer.close()
            await asyncio.sleep(0.1)
        assert alert in info.value.reason, info.value
        lines = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
        assert len(lines) == 1 and f"({reason})" in lines[0], lines
        assert not lst.connections
    finally:
        await lst.stop()
