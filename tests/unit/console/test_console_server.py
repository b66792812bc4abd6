"""The console over a real share-partition engine and fake services: every page and its JSON, the
numbers as the engine has them, and the security rules (CSRF, Origin, actions off, Basic
authentication with the sidecar's users, Host, the Content-Security-Policy)."""

from __future__ import annotations

import base64
import uuid
from types import SimpleNamespace

import pytest
from aiohttp import ClientSession, CookieJar

from kshare_sidecar.auth.authenticators import StaticAuthenticator
from kshare_sidecar.config import ConfigError, load_config
from kshare_sidecar.console.model import Services
from kshare_sidecar.console.server import Console
from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.group.admin_model import GroupListing, PartitionOffset, TopicOffsets
from kshare_sidecar.share.engine.config import Extensions, ShareConfig
from kshare_sidecar.share.engine.extended import ExtendedSharePartition

TOPIC_ID = uuid.uuid4()
GROUP = 'workers<script>alert(1)</script>'


class FakeAdmin:
    def __init__(self) -> None:
        self.groups = SimpleNamespace(coordinates=lambda g: 0)
        self.deleted: list[str] = []

    def list_groups(self):
        return [GroupListing(GROUP, "Stable")]

    async def describe_offsets(self, group, topics):
        return [TopicOffsets("orders", TOPIC_ID, [PartitionOffset(0, 0, 0, 10), PartitionOffset(1, 5, 0, 3)])]

    async def delete_groups(self, groups):
        self.deleted += groups
        return [(g, 68) for g in groups]  # NON_EMPTY_GROUP


def _services(now: list[int]) -> Services:
    sp = ExtendedSharePartition(ShareConfig(delivery_count_limit=3, record_lock_duration_ms=30_000),
                                lambda: now[0], ext=Extensions(dead_letter=True, backoff_ms=5000), start_offset=0)
    sp.acquire("member-1", [(0, 9, -1, False, False)], 100)
    sp.acknowledge("member-1", [(2, 3, [1]), (5, 5, [2]), (7, 7, [3])])
    slot = SimpleNamespace(key=SharePartitionKey(GROUP, str(TOPIC_ID), 0), topic="orders", partition=sp, dead=False)
    member = SimpleNamespace(member_id="member-1", client_id='cli"><img src=x onerror=alert(1)>',
                             client_host="/127.0.0.1", member_epoch=3, rack_id=None, subscribed={"orders"},
                             assignment={TOPIC_ID: {0}})
    group = SimpleNamespace(group_id=GROUP, state=SimpleNamespace(value="Stable"), group_epoch=3,
                            members={"member-1": member})
    backend = SimpleNamespace(topic_by_id=lambda tid: SimpleNamespace(name="orders"))
    partitions = SimpleNamespace(slots={slot.key: slot}, clock=lambda: now[0], backend=backend)
    coordinator = SimpleNamespace(groups={GROUP: group}, assignor_name=lambda g: "simple")
    return Services(coordinator=coordinator, partitions=partitions, admin=FakeAdmin(), node_id=1,
                    group_config=lambda g: {"errors.deadletterqueue.topic.name": "dlq.orders"})


def _http() -> ClientSession:
    return ClientSession(cookie_jar=CookieJar(unsafe=True))  # keeps cookies of an IP address host


def _config(**extra):
    return load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:1", "console.listen": "127.0.0.1:0",
                                          **extra})


@pytest.fixture
async def console():
    now = [1000]
    c = Console(_config(**{"console.actions.enable": True}), _services(now), authenticator=None, authorizer=None,
                backend=None, client_options={})
    await c.start()
    now[0] = 11_000  # the acquisition is 10 s old
    try:
        yield c
    finally:
        await c.close()


async def test_pages_and_their_json_show_the_engine_state(console):
    async with _http() as http:
        async with http.get(f"{console.url}/api/group", params={"id": GROUP}) as r:
            assert r.status == 200
            d = await r.json()
        p = d["partitions"][0]
        assert p["counts"] == {"available": 0, "acquired": 6, "backoff": 1, "keyorder": 0, "deadletter": 1,
                               "acknowledged": 2, "archived": 0}
        assert p["records_in_flight"] == d["records_in_flight"] == 8
        assert p["histogram"] == {"1": 10} and p["spso"] == 0 and p["speo"] == 9
        assert p["oldest_acquisition_age_ms"] == 10_000
        assert [s[2] for s in p["strip"]] == ["acquired", "acknowledged", "acquired", "backoff", "acquired",
                                              "deadletter", "acquired"]
        assert d["not_loaded"] == [{"topic": "orders", "partition": 1, "start_offset": 5, "lag": 3, "leader": 1}]
        assert d["members"][0]["assignment"] == {"orders": [0]}
        for path in ("/", "/group?id=" + GROUP.replace("<", "%3C").replace(">", "%3E"), "/redrives",
                     "/deadletters", "/api/groups", "/api/session"):
            async with http.get(console.url + path) as r:
                text = await r.text()
                assert r.status == 200, (path, text)
                assert "script-src 'self'" in r.headers["Content-Security-Policy"]
                assert "unsafe-inline" not in r.headers["Content-Security-Policy"]
                if not path.startswith("/api/"):  # JSON carries the text as it is
                    assert "<script>alert" not in text and "<img" not in text
        async with http.get(console.url + "/static/console.js") as r:
            assert r.status == 200 and "X-Kshare-Fragment" in await r.text()


async def test_a_change_needs_the_session_token_and_the_console_origin(console):
    async with _http() as http:
        async with http.get(f"{console.url}/api/session") as r:
            token = (await r.json())["csrf"]
        form = {"group": GROUP}
        async with http.post(f"{console.url}/actions/delete", data=form) as r:
            assert r.status == 403 and "did not come from" in await r.text()
        origin = {"Origin": console.url}
        async with http.post(f"{console.url}/actions/delete", data=form, headers=origin) as r:
            assert r.status == 403 and "form token" in await r.text()
        async with http.post(f"{console.url}/actions/delete", data=form,
                             headers={"Origin": "http://evil.example", "X-Kshare-Csrf": token}) as r:
            assert r.status == 403
        async with http.post(f"{console.url}/api/actions/delete", json=form,
                             headers={**origin, "X-Kshare-Csrf": token}) as r:
            assert r.status == 409 and "NON_EMPTY_GROUP" in (await r.json())["error"]
        assert console.services.admin.deleted == [GROUP]


async def test_a_page_for_another_host_name_is_refused(console):
    async with _http() as http:
        async with http.get(f"{console.url}/api/groups", headers={"Host": "attacker.example"}) as r:
            assert r.status == 421


async def test_actions_off_refuses_every_post():
    c = Console(_config(), _services([0]), authenticator=None, authorizer=None, backend=None, client_options={})
    await c.start()
    try:
        async with _http() as http:
            async with http.get(f"{c.url}/api/session") as r:
                token = (await r.json())["csrf"]
            async with http.post(f"{c.url}/api/actions/delete", json={"group": GROUP},
                                 headers={"Origin": c.url, "X-Kshare-Csrf": token}) as r:
                assert r.status == 403 and "console.actions.enable" in (await r.json())["error"]
            async with http.get(f"{c.url}/group", params={"id": GROUP}) as r:
                assert "Delete group" not in await r.text()
    finally:
        await c.close()


async def test_with_sasl_listeners_the_console_asks_for_the_same_users(tmp_path):
    users = tmp_path / "users"
    users.write_text("alice:alice-secret\n")
    cfg = _config(**{"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.credentials.file": str(users)})
    c = Console(cfg, _services([0]), authenticator=StaticAuthenticator(str(users)), authorizer=None, backend=None,
                client_options={})
    await c.start()
    try:
        async with _http() as http:
            async with http.get(f"{c.url}/api/groups") as r:
                assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Basic")
            bad = base64.b64encode(b"alice:wrong").decode()
            async with http.get(f"{c.url}/api/groups", headers={"Authorization": f"Basic {bad}"}) as r:
                assert r.status == 401
            good = base64.b64encode(b"alice:alice-secret").decode()
            async with http.get(f"{c.url}/api/session", headers={"Authorization": f"Basic {good}"}) as r:
                assert r.status == 200 and (await r.json())["principal"] == "User:alice"
    finally:
        await c.close()


@pytest.mark.parametrize("extra, key", [
    ({"console.listen": "0.0.0.0:0"}, "console.listen"),
    ({"console.listen": "0.0.0.0:0", "console.authentication": "required"}, "console.authentication"),
    ({"console.ssl.client.auth": "required"}, "console.ssl.client.auth"),
])
def test_unsafe_or_unusable_consoles_do_not_start(extra, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        Console(_config(**extra), _services([0]), authenticator=None, authorizer=None, backend=None,
                client_options={})
