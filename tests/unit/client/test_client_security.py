"""The asyncio consumer's TLS/SASL options (aiokafka's names) → BackendSecurity, and refusals."""

from __future__ import annotations

import ssl

import pytest

from kshare_sidecar.client import ShareConsumer
from kshare_sidecar.client.security import client_security


class Tokens:
    async def token(self) -> str:
        return "a.b.c"


def test_plaintext_needs_nothing():
    assert client_security() is None
    assert client_security("plaintext") is None


def test_ssl_uses_the_given_context_or_the_system_default():
    ctx = ssl.create_default_context()
    sec = client_security("SSL", ssl_context=ctx)
    assert sec.tls and not sec.sasl and sec.ssl_context is ctx
    default = client_security("SSL")
    assert isinstance(default.ssl_context, ssl.SSLContext) and default.ssl_context.check_hostname


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-512"])
def test_sasl_user_password_mechanisms(mechanism):
    sec = client_security("SASL_SSL", sasl_mechanism=mechanism, sasl_plain_username="alice",
                          sasl_plain_password="s3cret-pw")
    assert sec.tls and sec.sasl and sec.mechanism == mechanism.upper() and sec.username == "alice"
    assert "s3cret-pw" not in repr(sec) and "s3cret-pw" not in sec.describe()


def test_sasl_plain_is_the_default_mechanism_as_in_aiokafka():
    sec = client_security("SASL_PLAINTEXT", sasl_plain_username="u", sasl_plain_password="p")
    assert sec.mechanism == "PLAIN" and sec.ssl_context is None


async def test_oauthbearer_uses_the_token_provider():
    provider = Tokens()
    sec = client_security("SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=provider)
    assert sec.token_provider is provider
    token, expects_answer = await sec.sasl_authenticator().step(None)
    assert token == b"n,,\x01auth=Bearer a.b.c\x01\x01" and expects_answer


@pytest.mark.parametrize("kwargs, says", [
    ({"security_protocol": "TLS"}, "security_protocol='TLS': allowed values are PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"ssl_context": ssl.create_default_context()}, "ssl_context is only used with security_protocol SSL"),
    ({"security_protocol": "SSL", "ssl_context": "ca.pem"}, "ssl_context must be an ssl.SSLContext"),
    ({"sasl_mechanism": "PLAIN"}, "sasl_mechanism given but security_protocol=PLAINTEXT does not use SASL"),
    ({"security_protocol": "SSL", "sasl_plain_username": "u", "sasl_plain_password": "pw"},
     "sasl_plain_username, sasl_plain_password given but security_protocol=SSL"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "sasl_mechanism='GSSAPI': allowed values"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "u"},
     "sasl_mechanism=SCRAM-SHA-256 needs sasl_plain_username and sasl_plain_password"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"},
     "sasl_mechanism=OAUTHBEARER needs sasl_oauth_token_provider"),
])
def test_bad_options_name_the_parameter(kwargs, says):
    with pytest.raises(ValueError) as err:
        client_security(**kwargs)
    assert says in str(err.value)


def test_the_password_is_not_in_a_refusal():
    with pytest.raises(ValueError) as err:
        client_security("SASL_SSL", sasl_mechanism="SCRAM-SHA-1", sasl_plain_username="u",
                        sasl_plain_password="pw-Hidden-42")
    assert "pw-Hidden-42" not in str(err.value)


async def test_the_consumer_takes_the_options_and_validates_them_at_construction():
    c = ShareConsumer("t", bootstrap_servers="127.0.0.1:9", group_id="g", security_protocol="SASL_SSL",
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="u", sasl_plain_password="p")
    assert c._cluster._security.mechanism == "SCRAM-SHA-512"
    with pytest.raises(ValueError, match="security_protocol"):
        ShareConsumer("t", bootstrap_servers="127.0.0.1:9", group_id="g", security_protocol="SASL")
