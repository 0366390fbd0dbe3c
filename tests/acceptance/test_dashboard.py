"""The operator dashboard (V1) in a real browser: Debian's Chromium driven by Playwright against
the real `orbit` server. Sign-in by cookie, the keys and task pages showing holder, token and
parked count, a pause made in the page that the API sees, a read-only credential offered no
actions, a forged POST refused, and another tenant's objects never shown.

With ``ORBIT_SCREENSHOTS=DIR`` each page is also saved there at laptop and phone widths
(docs/screenshots holds the current set)."""

from __future__ import annotations

from urllib.parse import quote

from orbit_shell.server.queuecounts import COUNT_MAX
from tests.acceptance.ui import SHOTS, shoot, signed_in
from tests.helpers import Session, delete_tasks, limited_credential, submit, waiting_in_bulk


def _held_key_with_parked_tasks(client, tenant, key: str):
    ids = [
        submit(client, tenant, None, 201, concurrency_key=key, handler=f"invoice.render.{n}").json[
            "data"
        ]["task_id"]
        for n in range(3)
    ]
    session = Session(client, tenant, capacity=2, worker_id="render-1")
    [grant] = session.claim(1)
    session.start(grant["attempt_id"])
    return ids, session


def test_v1_keys_and_task_pages_show_holder_token_and_parked(browser, orbit_server, client, tenant):
    ids, _ = _held_key_with_parked_tasks(client, tenant, "invoice/7 ü")
    page = signed_in(browser, orbit_server, tenant.token)
    parked = page.locator(".card", has_text="Parked behind a key").locator("b")
    assert parked.inner_text() == "2", page.inner_text("main")
    shoot(page, "overview")
    page.goto(orbit_server + "/ui/keys")
    row = page.locator("tr.key-row", has_text="invoice/7 ü")
    assert row.count() == 1, page.inner_text("main")
    cells = row.locator("td").all_inner_texts()
    assert cells[1:5] == ["contended", "1", "1", "2"], cells
    shoot(page, "keys")
    row.locator("a").click()
    assert page.url.endswith("/ui/keys/" + quote("invoice/7 ü", safe=""))
    assert page.inner_text("#holder-token") == "1"
    assert page.inner_text("#parked-count") == "2"
    assert ids[0][:12] in page.inner_text("#key-detail")
    shoot(page, "key")
    page.goto(orbit_server + f"/ui/tasks/{ids[1]}")
    waiting = page.inner_text("#waiting-for")
    assert "invoice/7 ü" in waiting and ids[0][:12] in waiting and "token 1" in waiting
    shoot(page, "task")
    for name, heading in (
        ("tasks", "Tasks"),
        ("queues", "Queues"),
        ("workers", "Workers"),
        ("schedules", "Schedules"),
        ("review", "Needs review"),
    ):
        page.goto(orbit_server + f"/ui/{name}")
        assert page.inner_text("h1") == heading, page.inner_text("main")
        shoot(page, name)
    assert "render-1" in page.goto(orbit_server + "/ui/workers").text()
    page.goto(
        orbit_server + "/ui/tasks?handler=invoice.render.2&concurrency_key=invoice%2F7+%C3%BC"
    )
    assert page.locator("main tr").count() == 2  # the header and invoice.render.2's task
    assert page.input_value("input[name=handler]") == "invoice.render.2"
    if SHOTS:
        phone = signed_in(
            browser, orbit_server, tenant.token, viewport={"width": 390, "height": 844}
        )
        phone.goto(orbit_server + "/ui/keys")
        shoot(phone, "keys-phone")


def test_v1_pausing_a_queue_in_the_page_is_what_the_api_sees(browser, orbit_server, client, tenant):
    page = signed_in(browser, orbit_server, tenant.token)
    page.goto(orbit_server + "/ui/queues")
    row = page.locator(f"#queue-{tenant.queue_id}")
    assert row.count() == 1, page.inner_text("main")
    row.get_by_role("button", name="Pause").click()
    api = client.simulate_get(f"/v1/queues/{tenant.queue_id}", headers=tenant.headers)
    assert api.json["data"]["state"] == "PAUSED"
    assert page.locator(f"#queue-{tenant.queue_id}").get_by_role("button", name="Resume").count()
    page.locator(f"#queue-{tenant.queue_id}").get_by_role("button", name="Resume").click()
    api = client.simulate_get(f"/v1/queues/{tenant.queue_id}", headers=tenant.headers)
    assert api.json["data"]["state"] == "ACTIVE"


def test_v1_a_queue_past_the_count_bound_shows_the_bound_with_a_plus(
    browser, orbit_server, client, tenant, database
):
    """The overview's and the queues page's counts stop at queuecounts.COUNT_MAX (the cost of
    a page does not grow with the backlog) and say so."""
    _held_key_with_parked_tasks(client, tenant, "bulk/1")  # 2 parked through the API
    span = waiting_in_bulk(database, tenant, tenant.queue_id, COUNT_MAX, "BLOCKED", "bulk/1")
    try:
        page = signed_in(browser, orbit_server, tenant.token)
        parked = page.locator(".card", has_text="Parked behind a key").locator("b")
        assert parked.inner_text() == "10,000+", page.inner_text("main")
        ready = page.locator(".card", has_text="Ready to claim").locator("b")
        assert ready.inner_text() == "0"
        page.goto(orbit_server + "/ui/queues")
        cells = page.locator(f"#queue-{tenant.queue_id} td").all_inner_texts()
        assert cells[3:6] == ["10,000+", "1", "1"], cells  # unfinished, running, held keys
    finally:
        delete_tasks(database, span)


def test_v1_read_only_sees_no_actions_and_forged_posts_are_refused(
    browser, orbit_server, client, tenant, database
):
    ids, _ = _held_key_with_parked_tasks(client, tenant, "ro/1")
    reader = limited_credential(database, tenant, "tasks:read")["Authorization"][len("Bearer ") :]
    page = signed_in(browser, orbit_server, reader)
    for path in ("/ui/queues", f"/ui/tasks/{ids[2]}", "/ui/keys/ro%2F1", "/ui/schedules"):
        page.goto(orbit_server + path)
        assert page.locator("main form[method=post]").count() == 0, path
    # A form posted by another page carries no CSRF token: refused, nothing changes, for a
    # credential that may act (tasks:manage) as for one that may not.
    manager = signed_in(browser, orbit_server, tenant.token)
    for who in (manager, page):
        forged = who.request.post(
            orbit_server + f"/ui/tasks/{ids[2]}/cancel", form={"back": "/ui/"}, max_redirects=0
        )
        assert forged.status == 403, forged.text()
    wrong = manager.request.post(
        orbit_server + f"/ui/tasks/{ids[2]}/cancel", form={"csrf": "0" * 64}, max_redirects=0
    )
    assert wrong.status == 403
    other_origin = manager.request.post(
        orbit_server + f"/ui/queues/{tenant.queue_id}/pause",
        form={"csrf": "0"},
        headers={"Origin": "https://evil.example"},
        max_redirects=0,
    )
    assert other_origin.status == 403
    task = client.simulate_get(f"/v1/tasks/{ids[2]}", headers=tenant.headers).json["data"]
    assert task["state"] == "WAITING"
    queue = client.simulate_get(f"/v1/queues/{tenant.queue_id}", headers=tenant.headers)
    assert queue.json["data"]["state"] == "ACTIVE"
    # The same cancel from the page, with its token, goes through for the manager.
    manager.goto(orbit_server + f"/ui/tasks/{ids[2]}")
    manager.get_by_role("button", name="Cancel this task").click()
    task = client.simulate_get(f"/v1/tasks/{ids[2]}", headers=tenant.headers).json["data"]
    assert task["state"] == "CANCELLED"


def test_v1_a_sign_in_or_out_posted_from_another_site_is_refused(browser, orbit_server, tenant):
    """Login CSRF: the sign-in form has no CSRF token (nobody is signed in yet), so another
    site's page could post a token of its own and sign the visitor in as that credential. A
    sign-in or sign-out whose Origin names another host is refused and sets no cookie."""
    context = browser.new_context()
    forged = context.request.post(
        orbit_server + "/ui/login",
        form={"token": tenant.token},
        headers={"Origin": "https://evil.example"},
        max_redirects=0,
    )
    assert forged.status == 403, forged.text()
    assert [c for c in context.cookies() if c["name"] == "orbit_session"] == []
    context.close()
    page = signed_in(browser, orbit_server, tenant.token)  # the page's own form signs in
    out = page.request.post(
        orbit_server + "/ui/logout", headers={"Origin": "https://evil.example"}, max_redirects=0
    )
    assert out.status == 403
    page.goto(orbit_server + "/ui/")
    assert page.url.endswith("/ui/")  # still signed in


def test_v1_tenant_b_never_appears_for_tenant_a(
    browser, orbit_server, client, tenant, tenant_factory
):
    other = tenant_factory()
    theirs, _ = _held_key_with_parked_tasks(client, other, "tenant-b/secret")
    _held_key_with_parked_tasks(client, tenant, "tenant-a/mine")
    page = signed_in(browser, orbit_server, tenant.token)
    for path in ("/ui/", "/ui/keys", "/ui/tasks", "/ui/workers", "/ui/queues", "/ui/review"):
        page.goto(orbit_server + path)
        text = page.content()
        assert "tenant-b" not in text and theirs[0] not in text and other.queue_id not in text
    page.goto(orbit_server + "/ui/keys")
    assert "tenant-a/mine" in page.content()
    for path in (f"/ui/tasks/{theirs[0]}", "/ui/keys/tenant-b%2Fsecret"):
        response = page.goto(orbit_server + path)
        assert response.status == 404, path
    forged = page.request.get(orbit_server + "/ui/keys?state=bogus")
    assert forged.status == 400


def test_p2_a_key_of_limit_3_shows_its_policy_its_holders_by_slot_and_a_lowered_limit(
    browser, orbit_server, client, tenant
):
    key = "pool/tenant-7"
    made = client.simulate_post(
        "/v1/key-policies", headers=tenant.headers, json={"prefix": "pool/", "limit": 3}
    ).json["data"]
    ids = [
        submit(client, tenant, None, 201, concurrency_key=key).json["data"]["task_id"]
        for _ in range(4)
    ]
    session = Session(client, tenant, capacity=4, worker_id="pool-1")
    grants = [g for _ in range(3) for g in session.claim(1)]
    assert [g["concurrency_slot"] for g in grants] == [0, 1, 2]
    page = signed_in(browser, orbit_server, tenant.token)
    page.goto(orbit_server + "/ui/keys/" + quote(key, safe=""))
    limit = page.inner_text("#key-limit")
    assert "3 holders at once, 3 now" in limit and "pool/" in limit, limit
    rows = page.locator("#holders tr.holder-row")
    assert rows.count() == 3
    cells = [rows.nth(i).locator("td").all_inner_texts() for i in range(3)]
    assert [c[0] for c in cells] == ["0", "1", "2"]
    assert [c[1] for c in cells] == [g["concurrency_token"] for g in grants]
    assert page.inner_text("#holder-slot").startswith("0")
    shoot(page, "key-limit-3")
    page.goto(orbit_server + f"/ui/tasks/{ids[3]}")
    waiting = page.inner_text("#waiting-for")
    assert "slot 0 of the key's 3" in waiting, waiting
    page.goto(orbit_server + f"/ui/tasks/{ids[2]}")
    assert "slot 2" in page.inner_text("main")  # its attempt's token and slot
    # Lowered to 1 while three hold: nobody is revoked, and the page says why it shows three.
    client.simulate_put(
        f"/v1/key-policies/{made['policy_id']}",
        headers=tenant.headers,
        json={"prefix": "pool/", "limit": 1},
    )
    page.goto(orbit_server + "/ui/keys/" + quote(key, safe=""))
    assert "1 holder at once, 3 now" in page.inner_text("#key-limit")
    assert "More holders than the limit" in page.inner_text("main")
    # Without a policy: limit 1, said so, and no holders table.
    submit(client, tenant, None, 201, concurrency_key="solo/1")
    page.goto(orbit_server + "/ui/keys/" + quote("solo/1", safe=""))
    assert "no key policy: 1" in page.inner_text("#key-limit")
    assert page.locator("#holders").count() == 0


def test_p6_a_key_waiting_for_its_rate_says_when_on_its_page_and_its_next_task_s(
    browser, orbit_server, client, tenant
):
    key = "rated/tenant-9"
    client.simulate_post(
        "/v1/key-policies",
        headers=tenant.headers,
        json={"key": key, "limit": 1, "rate": {"permits": 1, "per_seconds": 3600}},
    )
    ids = [
        submit(client, tenant, None, 201, concurrency_key=key).json["data"]["task_id"]
        for _ in range(2)
    ]
    session = Session(client, tenant, capacity=2)
    [first] = session.claim(1, start=True)
    assert session.finish(first["attempt_id"]).status_code == 200
    page = signed_in(browser, orbit_server, tenant.token)
    page.goto(orbit_server + "/ui/keys/" + quote(key, safe=""))
    rate = page.inner_text("#key-rate")
    assert "at most 1 permit begin in any 3600 s; the next at" in rate, rate
    assert "waiting for the rate" in page.inner_text("#key-detail")
    shoot(page, "key-rate")
    page.goto(orbit_server + f"/ui/tasks/{ids[1]}")
    assert "waiting for its rate: runs at" in page.inner_text("#rate-wait")
