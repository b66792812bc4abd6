"""The static credentials file: passwords, Kafka's salted SCRAM form, errors naming the line."""

import subprocess
import sys

import pytest

from kshare_sidecar.auth.authenticators import StaticAuthenticator
from kshare_sidecar.auth.scram import ScramServer
from kshare_sidecar.config import ConfigError


def salted_line(user: str, password: str) -> str:
    out = subprocess.run([sys.executable, "-m", "kshare_sidecar.auth.authenticators", "SCRAM-SHA-512", user],
                         input=password + "\n", capture_output=True, text=True, check=True)
    return out.stdout.strip()


async def test_passwords_and_salted_lines(tmp_path):
    line = salted_line("bob", "bob-pw")
    assert line.startswith("bob:SCRAM-SHA-512:salt=") and "bob-pw" not in line
    f = tmp_path / "users"
    f.write_text(f"# dev users\nalice:alice:pw:with:colons\n\n{line}\n")
    auth = StaticAuthenticator(str(f))
    assert auth.users == {"alice", "bob"}
    assert await auth.verify_plain("alice", "alice:pw:with:colons") and not await auth.verify_plain("alice", "x")
    assert await auth.verify_plain("bob", "bob-pw") and not await auth.verify_plain("bob", "bob-PW")
    assert not await auth.verify_plain("carol", "x")
    assert await auth.scram_credential("SCRAM-SHA-256", "alice") is not None  # derived from the password
    assert await auth.scram_credential("SCRAM-SHA-256", "bob") is None  # only a SHA-512 line
    cred = await auth.scram_credential("SCRAM-SHA-512", "bob")
    server = ScramServer("SCRAM-SHA-512")
    server.client_first(b"n,,n=bob,r=abc")
    assert b",i=4096" in server.server_first(cred)
    assert "pw" not in repr(auth)


@pytest.mark.parametrize("text,needle", [
    ("alice\n", "line 1: expected user:password"),
    ("a:1\na:2\n", "line 2: user 'a' has a password twice"),
    ("b:SCRAM-SHA-512:salt=AA==,iterations=4096\n", "line 1: SCRAM credential lacks server_key, stored_key"),
    ("# nobody\n", "no users in it"),
])
def test_bad_files_name_the_key_and_line(tmp_path, text, needle):
    f = tmp_path / "users"
    f.write_text(text)
    with pytest.raises(ConfigError, match="sasl.credentials.file") as err:
        StaticAuthenticator(str(f))
    assert needle in str(err.value)
    with pytest.raises(ConfigError, match="cannot read it"):
        StaticAuthenticator(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="needs sasl.credentials.file"):
        StaticAuthenticator("")
