"""SCRAM server math against RFC 7677's vector, aiokafka's client, and Kafka's credential form."""

from __future__ import annotations

import asyncio
import base64

import pytest

from kshare_sidecar.auth.scram import (
    MIN_ITERATIONS,
    ScramCredential,
    ScramInvalid,
    ScramRefused,
    ScramServer,
    make_credential,
    password_matches,
)

# RFC 7677 section 3: user "user", password "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server() -> ScramServer:
    server = ScramServer("SCRAM-SHA-256", nonce=RFC_SERVER_NONCE)
    assert server.client_first(RFC_CLIENT_FIRST) == "user"
    cred = make_credential("SCRAM-SHA-256", "pencil", salt=RFC_SALT, iterations=4096)
    assert server.server_first(cred) == RFC_SERVER_FIRST
    return server


def test_rfc7677_vector():
    server = rfc_server()
    assert server.client_final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete


def test_a_wrong_proof_is_refused_without_a_server_signature():
    server = ScramServer("SCRAM-SHA-256", nonce=RFC_SERVER_NONCE)
    server.client_first(RFC_CLIENT_FIRST)
    server.server_first(make_credential("SCRAM-SHA-256", "not-pencil", salt=RFC_SALT))
    with pytest.raises(ScramInvalid, match="invalid client credentials"):
        server.client_final(RFC_CLIENT_FINAL)
    assert not server.complete


@pytest.mark.parametrize("final,needle", [
    (RFC_CLIENT_FINAL.replace(b"r=rOpr", b"r=xOpr"), "nonce"),
    (RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), "channel binding"),
    (b"c=biws,p=abc", "format"),
])
def test_malformed_or_tampered_final_messages(final, needle):
    with pytest.raises(ScramInvalid, match=needle):
        rfc_server().client_final(final)


@pytest.mark.parametrize("first", [b"y,,n=user,r=abc", b"p=tls-unique,,n=user,r=abc", b"n,,r=abc", b"n,,n=a=1,r=x",
                                   b"\xff\xfe", b"n,,n=user,r=a,b"])
def test_malformed_first_messages(first):
    with pytest.raises(ScramInvalid):
        ScramServer("SCRAM-SHA-512").client_first(first)


def test_authzid_must_be_the_user_and_saslnames_are_decoded():
    with pytest.raises(ScramRefused, match="authorization id that is different from username"):
        ScramServer("SCRAM-SHA-512").client_first(b"n,a=bob,n=alice,r=abc")
    assert ScramServer("SCRAM-SHA-512").client_first(b"n,a=alice,n=alice,r=abc") == "alice"
    assert ScramServer("SCRAM-SHA-512").client_first(b"n,,n=a=2Cb=3Dc,r=abc,tokenauth=false") == "a,b=c"


def test_iterations_below_kafkas_minimum_are_refused():
    server = ScramServer("SCRAM-SHA-512")
    server.client_first(b"n,,n=u,r=abc")
    with pytest.raises(ScramInvalid, match="less than the minimum"):
        server.server_first(make_credential("SCRAM-SHA-512", "pw", iterations=MIN_ITERATIONS - 1))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "a,b=c"])
async def test_aiokafkas_client_authenticates(mechanism, user):
    """An independent client implementation (aiokafka's) against the server, both mechanisms."""
    from aiokafka.conn import ScramAuthenticator

    client = ScramAuthenticator(loop=asyncio.get_running_loop(), sasl_plain_username=user,
                                sasl_plain_password="s3cret-ü", sasl_mechanism=mechanism)
    server = ScramServer(mechanism)
    token, _ = await client.step(None)
    assert server.client_first(token) == user
    token, _ = await client.step(server.server_first(make_credential(mechanism, "s3cret-ü")))
    final = server.client_final(token)
    assert await client.step(final) is None  # the client checked the server signature


def test_kafka_credential_form_round_trips_and_checks_a_password():
    cred = make_credential("SCRAM-SHA-512", "pw", iterations=8192)
    text = cred.to_kafka()
    assert text.startswith("salt=") and text.endswith(",iterations=8192")
    assert ScramCredential.from_kafka(text) == cred
    assert password_matches("SCRAM-SHA-512", cred, "pw") and not password_matches("SCRAM-SHA-512", cred, "pW")
    with pytest.raises(ValueError, match="lacks server_key"):
        ScramCredential.from_kafka("salt=AA==,stored_key=AA==,iterations=4096")
    assert "stored_key" not in repr(cred)


# -- the client side (delegation tokens: tokenauth=true) ------------------------------------------
def test_client_rfc7677_vector():
    from kshare_sidecar.protocol.scram import ScramClient

    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(ScramInvalid, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_client_with_the_tokenauth_extension_against_the_server(mechanism):
    """Kafka's delegation-token form: ``n,,n=<token id>,r=<nonce>,tokenauth=true`` and the HMAC as
    password; the server (Kafka's grammar) accepts the extension and the proof."""
    from kshare_sidecar.protocol.scram import ScramClient

    client = ScramClient(mechanism, "tok=en,id", "aG1hYw==", extensions={"tokenauth": "true"})
    first = client.first()
    assert first.endswith(b",tokenauth=true") and b"n=tok=3Den=2Cid," in first
    server = ScramServer(mechanism)
    assert server.client_first(first) == "tok=en,id"
    server_first = server.server_first(make_credential(mechanism, "aG1hYw=="))
    client.verify(server.client_final(client.final(server_first)))
    assert server.complete


@pytest.mark.parametrize("server_first,needle", [
    (b"r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
    (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),  # not extended
    (b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1024", "iterations"),
    (b"r=rOprNGfwEbeRWgbNEkqOx,i=4096", "format"),
])
def test_client_refuses_a_bad_server_first_message(server_first, needle):
    from kshare_sidecar.protocol.scram import ScramClient

    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    client.first()
    with pytest.raises(ScramInvalid, match=needle):
        client.final(server_first)


def test_client_repr_and_errors_carry_no_secret():
    from kshare_sidecar.protocol.scram import ScramClient

    client = ScramClient("SCRAM-SHA-512", "user", "s3cret-pw")
    assert "s3cret" not in repr(client)
    with pytest.raises(ScramInvalid) as info:
        client.verify(b"e=invalid-proof")
    assert "s3cret" not in str(info.value)
