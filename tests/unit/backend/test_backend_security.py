"""backend.* security settings: what they build, and that errors name the key, never the secret."""

from __future__ import annotations

import asyncio

import pytest

from kshare_sidecar.config import ConfigError, load_config
from kshare_sidecar.backend.security import BackendSecurity

SECRET = "hunter2-very-secret"


def _security(**settings):
    cfg = load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092", **settings})
    return BackendSecurity.from_config(cfg), cfg


def test_plaintext_is_the_default_and_adds_nothing():
    security, _ = _security()
    assert security.aiokafka_options() == {"security_protocol": "PLAINTEXT"}
    assert not security.sasl and not security.tls


def test_scram_from_a_jaas_line():
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{SECRET}";'
    security, cfg = _security(**{"backend.security.protocol": "SASL_PLAINTEXT",
                                 "backend.sasl.mechanism": "SCRAM-SHA-512", "backend.sasl.jaas.config": jaas})
    options = security.aiokafka_options()
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("alice", SECRET)
    assert SECRET not in repr(security) and SECRET not in repr(cfg) and SECRET not in security.describe()


def test_password_from_a_file(tmp_path):
    path = tmp_path / "pw"
    path.write_text(SECRET + "\n")
    security, _ = _security(**{"backend.security.protocol": "SASL_PLAINTEXT", "backend.sasl.username": "bob",
                               "backend.sasl.password.file": str(path)})
    assert security.password == SECRET


@pytest.mark.parametrize("settings, key", [
    ({"backend.security.protocol": "SASL_SSL"}, "backend.sasl.username"),
    ({"backend.security.protocol": "SASL_PLAINTEXT", "backend.sasl.username": "a",
      "backend.sasl.password.file": "/nonexistent/pw"}, "backend.sasl.password.file"),
    ({"backend.security.protocol": "SASL_PLAINTEXT", "backend.sasl.mechanism": "OAUTHBEARER"},
     "backend.sasl.oauthbearer.token.file"),
    ({"backend.security.protocol": "SSL", "backend.ssl.truststore.location": "/nonexistent/ca.pem"},
     "backend.ssl.truststore.location"),
    ({"backend.security.protocol": "SASL_PLAINTEXT", "backend.sasl.jaas.config": 'x required username="a";'},
     "backend.sasl.jaas.config"),
])
def test_bad_settings_name_the_key(settings, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        _security(**settings)


def test_an_unknown_protocol_lists_the_allowed_ones():
    with pytest.raises(ConfigError, match="SASL_SSL"):
        _security(**{"backend.security.protocol": "KERBEROS"})


def test_a_bad_secret_is_not_echoed():
    with pytest.raises(ConfigError) as exc:
        load_config(env={}, overrides={"bootstrap.servers": "a:1", "backend.ssl.key.password": SECRET,
                                       "backend.ssl.endpoint.identification.algorithm": "bogus"})
    assert SECRET not in str(exc.value)


def test_the_token_file_provider_is_one_aiokafka_accepts(tmp_path):
    """aiokafka's clients (reads, state writers, admin) refuse an OAUTHBEARER provider that is not
    an AbstractTokenProvider; the e2e found the plain class refused at start-up."""
    from aiokafka.abc import AbstractTokenProvider

    token = tmp_path / "token"
    token.write_text("a.b.\n")
    security, _ = _security(**{"backend.security.protocol": "SASL_PLAINTEXT", "backend.sasl.mechanism": "OAUTHBEARER",
                               "backend.sasl.oauthbearer.token.file": str(token)})
    options = security.aiokafka_options()
    assert isinstance(options["sasl_oauth_token_provider"], AbstractTokenProvider)

    async def construct():  # aiokafka's connection is where the check is (no I/O at construction)
        from aiokafka.conn import AIOKafkaConnection

        AIOKafkaConnection("127.0.0.1", 9, **{k: v for k, v in options.items() if k != "security_protocol"})
        return await options["sasl_oauth_token_provider"].token()

    assert asyncio.run(construct()) == "a.b."
