"""The console in a real browser (Debian's chromium, headless, driven through Debian's
chromedriver by Selenium): a scripted run with real share consumers leaves a group mid-way —
records held in flight, redeliveries, dead letters (some hostile, some binary) — and the pages
show exactly that; a redrive started from the page works end to end; an unauthenticated or
cross-site action is refused; no payload runs as script. The screenshots of docs/console.md are
taken here. Opt-in: `make test-console`."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from kshare_sidecar.testing.kafka import free_port
from tests.e2e.conftest import SidecarProcess
from tests.e2e.console_support import ConsoleClient, ShareWorker, produce_values, read_topic, wait_for
from tests.support import create_topic, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.optin("console")]

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
USER, PASSWORD = "alice", "alice-secret"
EVIL_SCRIPT = b"evil-<script>window.__pwned=1</script>"
EVIL_IMG = b'evil-"><img src=x onerror="window.__pwned=2">'
BINARY = b"\x00bin-\xff\xfe\x01\x02"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1700"]


def _browser(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                            options=options)


def _values() -> list[bytes]:
    out = []
    for i in range(120):
        out.append(b"rej-%d" % i if i % 11 == 5 else b"rel-%d" % i if i % 23 == 7 else
                   b"relonce-%d" % i if i % 7 == 3 else b"ok-%d" % i)
    out[40], out[41], out[42] = EVIL_SCRIPT, EVIL_IMG, BINARY
    return out


def _number(text: str) -> int:
    return int(re.match(r"[\d,]+", text.strip()).group(0).replace(",", ""))


def _attacker_page(console: str, group: str) -> tuple[http.server.HTTPServer, str]:
    """A page on another origin with a form posting a delete to the console (a CSRF attempt)."""
    page = (f'<!doctype html><form method="post" action="{console}/actions/delete">'
            f'<input type="hidden" name="group" value="{group}"><button id="go">win a prize</button></form>').encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://localhost:{server.server_address[1]}/"


def test_the_console_in_a_browser_shows_the_real_state_acts_and_refuses(kafka_39, tmp_path):
    from selenium.webdriver.common.by import By

    backend = kafka_39.bootstrap
    topic, dlq, group = "orders-" + unique("b")[-8:], unique("dlq.orders"), unique("workers")
    create_topic(backend, topic, 1)  # one share-partition that every consumer of the group shares
    users = tmp_path / "users"
    users.write_text(f"{USER}:{PASSWORD}\n")
    plain, sasl, port = free_port(), free_port(), free_port()
    sc = SidecarProcess(backend, tmp_path / "sidecar.log", port=plain,
                        listeners=f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                        env={"KSHARE_SASL_CREDENTIALS_FILE": str(users), "KSHARE_CONSOLE_LISTEN": f"127.0.0.1:{port}",
                             "KSHARE_CONSOLE_ACTIONS_ENABLE": "true", "KSHARE_CONSOLE_SAMPLE_INTERVAL_MS": "1000"}
                        ).start()
    console = f"http://127.0.0.1:{port}"
    api = ConsoleClient(console, USER, PASSWORD)
    workers: list[ShareWorker] = []
    drivers = []
    attacker = None
    try:
        # created through the sidecar with Kafka 4.4's opt-in, which the sidecar keeps for 3.9
        create_topic(sc.bootstrap, dlq, 1, config={"errors.deadletterqueue.group.enable": "true"})
        set_group_config(sc.bootstrap, group, {"errors.deadletterqueue.topic.name": dlq,
                                               "errors.deadletterqueue.copy.record.enable": "true",
                                               "share.delivery.count.limit": "3",
                                               "share.record.lock.duration.ms": "60000",
                                               "share.release.backoff.ms": "1000"})
        values = _values()
        produce_values(backend, topic, values)
        expected_dead = sum(1 for v in values if v.startswith((b"rej-", b"rel-", b"evil-", b"\x00bin-")))
        worker = ShareWorker(sc.bootstrap, group, topic).start()
        workers.append(worker)
        wait_for(lambda: api.get(f"/api/group?id={group}")[1].get("dead_lettered_total") == expected_dead, 120,
                 what=f"{expected_dead} dead letters")
        relonce = sum(1 for v in values if v.startswith(b"relonce-"))
        wait_for(lambda: sum(1 for e in worker.deliveries() if e["v"].startswith(b"relonce-")) == 2 * relonce, 60,
                 what="every relonce record redelivered")
        worker.stop()
        redelivered = sum(1 for e in worker.deliveries() if e["dc"] > 1)
        # a group mid-way: a consumer holding the head of new records (in flight), another working
        # through the rest: accepted, rejected (dead letters), released (held by a 30 s backoff)
        set_group_config(sc.bootstrap, group, {"share.release.backoff.ms": "30000"})
        fresh = [b"rel-new-%d" % i if i % 6 == 0 else b"rej-new-%d" % i if i % 6 == 1 else b"ok-new-%d" % i
                 for i in range(60)]
        produce_values(backend, topic, fresh, one_per_batch=True)
        holder = ShareWorker(sc.bootstrap, group, topic, hold=True, max_poll_records=10).start()
        workers.append(holder)
        held = wait_for(lambda: holder.deliveries(), 60, what="the holder's acquisition")
        second = ShareWorker(sc.bootstrap, group, topic).start()
        workers.append(second)
        wait_for(lambda: len(second.deliveries()) >= len(fresh) - len(held), 60, what="the rest delivered once")
        second.stop()
        released = [e for e in second.deliveries() if e["ack"] == "release"]
        expected_dead += sum(1 for e in second.deliveries() if e["ack"] == "reject")
        wait_for(lambda: api.get(f"/api/group?id={group}")[1].get("dead_lettered_total") == expected_dead, 60,
                 what=f"{expected_dead} dead letters")
        time.sleep(3)  # the console samples once a second: a few points for its plots

        browser = _browser(tmp_path / "profile")
        drivers.append(browser)
        browser.get(f"http://{USER}:{PASSWORD}@127.0.0.1:{port}/")
        wait_for(lambda: group in browser.page_source, 20, what="the groups page")
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / "groups.png"))

        browser.get(f"{console}/group?id={group}")
        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "section.partition"), 20, what="the group page")
        browser.find_element(By.ID, "pause").click()  # no refresh while the test reads the page
        facts = browser.execute_script(
            "const o = {}; document.querySelectorAll('dl dd').forEach(d => o[d.dataset.field] = d.textContent); "
            "return o;")
        _, truth = api.get(f"/api/group?id={group}")
        assert _number(facts["records_in_flight"]) == truth["records_in_flight"] == len(held) + len(released)
        assert _number(facts["dead-lettered"]) == truth["dead_lettered_total"] == expected_dead
        assert _number(facts["redeliveries"]) == truth["redelivered_total"] == redelivered
        held_by, backoff_by = Counter(e["p"] for e in held), Counter(e["p"] for e in released)
        for p in truth["partitions"]:
            assert p["counts"]["acquired"] == held_by.get(p["partition"], 0), p
            assert p["counts"]["backoff"] == backoff_by.get(p["partition"], 0), p
            assert p["histogram"].get("1", 0) >= p["counts"]["acquired"] + p["counts"]["backoff"]
        browser.save_screenshot(str(SHOTS / "group.png"))

        browser.get(f"{console}/deadletters?topic={dlq}")
        browser.find_element(By.ID, "pause").click()
        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "table.letters > tbody > tr"), 20, what="dead letters")
        rows = browser.find_elements(By.CSS_SELECTOR, "table.letters > tbody > tr")
        assert len(rows) == min(expected_dead, 50)
        assert browser.execute_script("return window.__pwned") is None
        assert len(browser.find_elements(By.TAG_NAME, "script")) == 1  # the console's own
        assert not browser.find_elements(By.CSS_SELECTOR, "main img")
        shown = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "code.payload")]
        assert any("<script>window.__pwned=1</script>" in t for t in shown), shown[:10]
        assert any('"><img src=x onerror="window.__pwned=2">' in t for t in shown)
        assert any(t.startswith("00 62 69 6e 2d ff fe") for t in shown)  # binary as hex
        browser.save_screenshot(str(SHOTS / "deadletters.png"))
        evil = next(r for r in read_topic(backend, dlq) if (r.value() or b"") == EVIL_IMG)
        browser.get(f"{console}/deadletter?topic={dlq}&partition={evil.partition()}&offset={evil.offset()}")
        assert browser.execute_script("return window.__pwned") is None
        browser.save_screenshot(str(SHOTS / "deadletter.png"))

        # a cross-site form with the browser's cached credentials: refused, nothing deleted
        attacker, attacker_url = _attacker_page(console, group)
        browser.get(attacker_url)
        browser.find_element(By.ID, "go").click()
        wait_for(lambda: "did not come from this console" in browser.page_source, 20, what="the CSRF refusal")
        assert api.get(f"/api/group?id={group}")[0] == 200
        # without credentials: nothing is shown, no action is taken
        stranger = _browser(tmp_path / "profile-stranger")
        drivers.append(stranger)
        stranger.get(f"{console}/group?id={group}")
        assert group not in stranger.page_source
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{console}/api/actions/delete", data=b"group=" +
                                                          group.encode(), headers={"Origin": console}), timeout=10)
        assert refused.value.code == 401

        # the action, end to end from the page: redrive the dead letters back to their topic
        holder.stop()
        browser.get(f"{console}/group?id={group}")
        browser.find_element(By.ID, "pause").click()
        form = browser.find_element(By.CSS_SELECTOR, "form[action='/actions/redrive']")
        rate = form.find_element(By.NAME, "rate")
        rate.clear()
        rate.send_keys("40")
        form.find_element(By.CSS_SELECTOR, "button").click()
        browser.switch_to.alert.accept()
        wait_for(lambda: "/redrives" in browser.current_url, 20, what="the redrives page")
        status = api.wait_redrive(group, timeout_s=120)
        assert status["state"] == "done" and status["redriven"] == expected_dead, status
        wait_for(lambda: "done" in browser.find_element(By.CSS_SELECTOR, "table.redrives").text, 20,
                 what="the page showing the redrive done")
        browser.save_screenshot(str(SHOTS / "redrives.png"))
        copies = Counter(dict(m.headers() or []).get("kshare.redrive.source") for m in read_topic(backend, topic))
        copies.pop(None, None)
        assert len(copies) == expected_dead and set(copies.values()) == {1}
        print(f"\n[kshare] browser: {truth['records_in_flight']} in flight ({len(held)} held by a consumer, "
              f"{len(released)} in release backoff), {redelivered} redeliveries, {expected_dead} dead letters "
              f"shown as the engine has them; redrive from the page: {expected_dead} records back once; "
              f"screenshots in {SHOTS}")
    finally:
        for d in drivers:
            d.quit()
        if attacker is not None:
            attacker.shutdown()
        for w in workers:
            w.stop()
        sc.stop()
