"""The console over HTTPS with client certificates (the principal of an SSL listener's mTLS), and
the ACLs of each page and action (a principal allowed to look at a group but not to change it)."""

from __future__ import annotations

import base64
import ssl
import subprocess

import aiohttp
import pytest

from kshare_sidecar.auth.acls import Acl, AclSet, Decider, Op, Pattern, Permission, Res
from kshare_sidecar.auth.authenticators import StaticAuthenticator
from kshare_sidecar.console.server import Console
from kshare_sidecar.testing.maven import require_tool

from tests.unit.console.test_console_server import GROUP, _config, _http, _services

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")
    d = tmp_path_factory.mktemp("pki")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=t-ca", "-keyout", "ca.key",
        "-out", "ca.pem")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, subject in (("server", "/CN=localhost"), ("client", "/O=ops/CN=operator")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
            "-extfile", "san.ext", "-out", f"{name}.pem")
    (d / "keystore.pem").write_text((d / "server.pem").read_text() + (d / "server.key").read_text())
    return d


async def test_client_certificates_are_the_principal_and_required(pki):
    cfg = _config(**{"listeners": "SSL://127.0.0.1:0", "ssl.client.auth": "required",
                     "ssl.keystore.location": str(pki / "keystore.pem"), "ssl.truststore.location": str(pki / "ca.pem"),
                     "console.ssl.enable": True, "console.ssl.client.auth": "required"})
    c = Console(cfg, _services([0]), authenticator=None, authorizer=None, backend=None, client_options={})
    await c.start()
    try:
        assert c.url.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        trusted.load_cert_chain(pki / "client.pem", pki / "client.key")
        async with _http() as http, http.get(f"{c.url}/api/session", ssl=trusted) as r:
            assert r.status == 200 and (await r.json())["principal"] == "User:CN=operator,O=ops"
        anonymous = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        with pytest.raises(aiohttp.ClientError):
            async with _http() as http, http.get(f"{c.url}/api/session", ssl=anonymous) as r:
                await r.read()
    finally:
        await c.close()


class OnlyDescribe:
    """An authorizer whose ACLs let every principal DESCRIBE the group and nothing else."""

    async def decider(self, principal: str, host: str, protocol: str) -> Decider:
        acl = Acl(Res.GROUP, GROUP, Pattern.LITERAL, "User:*", "*", Op.DESCRIBE, Permission.ALLOW)
        return Decider(AclSet([acl]), principal, host)


async def test_each_action_is_checked_with_its_kafka_apis_acls(tmp_path):
    users = tmp_path / "users"
    users.write_text("alice:alice-secret\n")
    cfg = _config(**{"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.credentials.file": str(users),
                     "console.actions.enable": True})
    services = _services([0])
    c = Console(cfg, services, authenticator=StaticAuthenticator(str(users)), authorizer=OnlyDescribe(),
                backend=None, client_options={})
    await c.start()
    auth = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-secret").decode()}
    try:
        async with _http() as http:
            async with http.get(f"{c.url}/api/group", params={"id": GROUP}, headers=auth) as r:
                assert r.status == 200  # DESCRIBE on the group: the page
                detail = await r.json()
            assert detail["partitions"] == []  # no DESCRIBE on the topic: its share-partitions hidden
            async with http.get(f"{c.url}/api/session", headers=auth) as r:
                token = (await r.json())["csrf"]
            post = {**auth, "Origin": c.url, "X-Kshare-Csrf": token}
            for action, body, refusal in (
                    ("delete", {"group": GROUP}, "may not DELETE GROUP"),
                    ("reset", {"group": GROUP, "to": "earliest"}, "may not READ GROUP"),
                    ("redrive", {"group": GROUP, "dlq_topic": "dlq.orders"}, "may not READ GROUP")):
                async with http.post(f"{c.url}/api/actions/{action}", json=body, headers=post) as r:
                    assert r.status == 403 and refusal in (await r.json())["error"], action
            async with http.get(f"{c.url}/api/deadletters", params={"topic": "dlq.orders"}, headers=auth) as r:
                assert r.status == 403 and "may not READ TOPIC" in (await r.json())["error"]
        assert services.admin.deleted == []
    finally:
        await c.close()
