"""`listeners` in Kafka's form, the legacy `listen`, and the listener security settings."""

import pytest

from kshare_sidecar.config import ConfigError, ListenerSpec, load_config

BASE = {"bootstrap.servers": "127.0.0.1:9092"}


def specs(**overrides):
    return load_config(env={}, overrides={**BASE, **overrides}).listener_specs()


def test_listen_alone_is_one_plaintext_listener():
    assert specs(listen="127.0.0.1:9192") == [ListenerSpec("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9192,
                                                            "127.0.0.1", 9192)]
    assert specs(listen="0.0.0.0:9192", **{"advertised.listener": "kshare.example:19192"})[0].advertised_host == \
        "kshare.example"
    assert specs(listen="127.0.0.1:0")[0].advertised_port is None  # the bound port, known after binding


def test_an_empty_kshare_listen_clears_the_images_listen_for_listeners():
    """The image sets KSHARE_LISTEN=0.0.0.0:9192, which a container cannot unset, only override: an
    empty value is 'not set', so a compose service can use listeners (compose/kafka39-cluster.yml)."""
    env = {"KSHARE_BOOTSTRAP_SERVERS": "kafka:19092", "KSHARE_LISTEN": "0.0.0.0:9192",
           "KSHARE_LISTENERS": "INTERNAL://0.0.0.0:19192,EXTERNAL://0.0.0.0:9192",
           "KSHARE_ADVERTISED_LISTENERS": "INTERNAL://kshare-1:19192,EXTERNAL://localhost:9192",
           "KSHARE_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"}
    with pytest.raises(ConfigError, match="set either listeners or listen"):
        load_config(env=env)
    got = load_config(env={**env, "KSHARE_LISTEN": ""}).listener_specs()
    assert [(s.name, s.port, s.advertised_host, s.advertised_port) for s in got] == [
        ("INTERNAL", 19192, "kshare-1", 19192), ("EXTERNAL", 9192, "localhost", 9192)]
    assert load_config(env={"KSHARE_BOOTSTRAP_SERVERS": "k:1", "KSHARE_LISTEN": ""})["listen"] == "127.0.0.1:9192"


def test_several_listeners_advertised_per_name():
    got = specs(listeners="PLAINTEXT://127.0.0.1:9192,SASL_SSL://0.0.0.0:9194,INTERNAL://[::1]:9195",
                **{"advertised.listeners": "SASL_SSL://kshare.example:443",
                   "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,INTERNAL:SSL",
                   "ssl.keystore.location": "/etc/kshare/server.pem"})
    assert [(s.name, s.protocol, s.host, s.port, s.advertised_host, s.advertised_port) for s in got] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9192, "127.0.0.1", 9192),
        ("SASL_SSL", "SASL_SSL", "0.0.0.0", 9194, "kshare.example", 443),
        ("INTERNAL", "SSL", "::1", 9195, "::1", 9195)]
    assert [s.tls for s in got] == [False, True, True] and [s.sasl for s in got] == [False, True, False]


def test_an_empty_host_binds_everything_and_advertises_the_host_name():
    import socket

    (spec,) = specs(listeners="PLAINTEXT://:9192")
    assert (spec.host, spec.advertised_host) == ("", socket.getfqdn())


@pytest.mark.parametrize("overrides,needle", [
    ({"listeners": "PLAINTEXT:/127.0.0.1:1"}, "listeners (from command line) = 'PLAINTEXT:/127.0.0.1:1': "
                                              "'PLAINTEXT:/127.0.0.1:1' is not NAME://host:port"),
    ({"listeners": "PLAINTEXT://a:1,PLAINTEXT://a:2"}, "listener name PLAINTEXT appears twice"),
    ({"listeners": "OUTSIDE://a:1"}, "listener name OUTSIDE is not in listener.security.protocol.map"),
    ({"listeners": "SSL://a:1"}, "ssl.keystore.location is required for SSL and SASL_SSL listeners"),
    ({"listeners": "PLAINTEXT://a:1", "listen": "a:2"}, "set either listeners or listen, not both"),
    ({"listeners": "PLAINTEXT://a:1", "advertised.listeners": "SSL://b:1"},
     "advertised.listeners names SSL, which is not in listeners"),
    ({"advertised.listeners": "PLAINTEXT://b:1"}, "advertised.listeners needs listeners"),
    ({"ssl.client.auth": "want"}, "ssl.client.auth (from command line) = 'want': allowed values are none, "
                                  "requested, required"),
    ({"ssl.client.auth": "required"}, "ssl.client.auth = 'required' needs ssl.truststore.location"),
    ({"sasl.enabled.mechanisms": "PLAIN,GSSAPI"}, "allowed values are PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"listener.security.protocol.map": "X:TLS"}, "'X:TLS' is not NAME:PROTOCOL"),
])
def test_errors_name_the_key_and_the_allowed_values(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(env={}, overrides={**BASE, **overrides})
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_mechanisms_and_the_key_password_stays_secret():
    cfg = load_config(env={"KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512, PLAIN",
                           "KSHARE_SSL_KEY_PASSWORD": "key-Secret-1"}, overrides=BASE)
    assert cfg.sasl_mechanisms == ("SCRAM-SHA-512", "PLAIN")
    assert "key-Secret-1" not in repr(cfg)
