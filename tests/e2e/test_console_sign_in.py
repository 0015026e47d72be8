"""Single sign-on in the console, in a real browser (Debian's chromium through Playwright): the
authorization-code flow with PKCE against a real OIDC provider on loopback
(tests.support.oidc_provider), with a real control plane (`python -m controlplane`, its web port,
the provider's keys in a JWKS file). Each test does what a person would and asserts what they
would see: signed in as the provider's subject, the sessions listed; a tampered `state` refused;
the provider's error shown; an expired sign-in sent back to the sign-in screen, saying so.

The provider runs in the test's event loop, so the browser is driven with Playwright's async API.
Screenshots go to $ASTRABOX_TEST_ARTIFACTS/console-sign-in (else the test's tmp directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
import pytest_asyncio

from tests.support.oidc_provider import OidcProvider
from tests.support.processes import Process, start_controlplane

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
CONSOLE_BUILT = Path(__file__).resolve().parents[2] / "controlplane" / "web" / "console" / "index.html"
CLIENT = "astrabox-console"
SSO_BUTTON = "Sign in with single sign-on"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium; scripts/test does as root)"
    ),
    pytest.mark.skipif(not CONSOLE_BUILT.exists(), reason="the console is not built (scripts/build-console)"),
]

playwright_async = pytest.importorskip("playwright.async_api", reason="playwright is not installed (the test extra)")
expect = playwright_async.expect


@pytest_asyncio.fixture
async def provider() -> AsyncIterator[OidcProvider]:
    idp = OidcProvider(clients={})
    async with idp.running():
        yield idp


@contextlib.asynccontextmanager
async def control_plane(database_url: str, tmp_path: Path, issuer: str, keys: dict[str, Any]) -> AsyncIterator[str]:
    """`python -m controlplane` taking `issuer`'s ID tokens (its keys in a file); yields its web URL."""
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(keys))
    args = [
        "--web-listen", "127.0.0.1:0",
        "--oidc-issuer", issuer,
        "--oidc-audience", CLIENT,  # an ID token names the console's client id as its audience
        "--oidc-jwks", str(jwks),
        "--console-oidc-client-id", CLIENT,
        "--oidc-leeway", "0",  # the expiry test's token expires when it says
    ]  # fmt: skip
    # Blocking waits go to a thread: the provider answers from this event loop meanwhile.
    process: Process
    process, _ = await asyncio.to_thread(start_controlplane, database_url, tmp_path, args=args)
    try:
        found = await asyncio.to_thread(process.wait_for_line, r"web API and console on (http://\S+)")
        yield found.group(1).rstrip("/")
    finally:
        await asyncio.to_thread(process.stop, 30)


@pytest_asyncio.fixture
async def console_url(provider: OidcProvider, database_url: str, tmp_path: Path) -> AsyncIterator[str]:
    """A control plane that takes the provider's ID tokens, its console registered at the provider."""
    async with control_plane(database_url, tmp_path, provider.issuer, provider.jwks()) as url:
        provider.clients[CLIENT] = f"{url}/"  # the console's redirect URI: its own page
        yield url


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[Any]:
    async with playwright_async.async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@dataclass
class Tab:
    page: Any
    url: str
    artifacts: Path
    name: str
    problems: list[str]
    shots: int = 0

    async def shot(self, step: str) -> None:
        self.shots += 1
        await self.page.screenshot(
            path=str(self.artifacts / f"{self.name}-{self.shots:02d}-{step}.png"), full_page=True
        )

    async def storage(self, name: str) -> Any:
        return await self.page.evaluate(f"sessionStorage.getItem({json.dumps(name)})")

    def check_clean(self) -> None:
        assert not self.problems, self.problems


@pytest_asyncio.fixture
async def tab(browser: Any, console_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Tab]:
    base = os.environ.get("ASTRABOX_TEST_ARTIFACTS")
    artifacts = Path(base) / "console-sign-in" if base else tmp_path / "screenshots"
    artifacts.mkdir(parents=True, exist_ok=True)
    context = await browser.new_context(viewport={"width": 1366, "height": 768})
    context.set_default_timeout(30_000)
    page = await context.new_page()
    problems: list[str] = []

    def on_console(message: Any) -> None:
        if "Content Security Policy" in message.text or "Refused to" in message.text:
            problems.append(f"CSP: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened = Tab(page, console_url, artifacts, request.node.name, problems)
    try:
        yield opened
    finally:
        try:
            await opened.shot("end")
        finally:
            await context.close()


async def redirect_authorization(tab: Tab, rewrite: Any) -> None:
    """The browser's request to the provider's /authorize is sent on as `rewrite(query)` makes it."""

    async def handle(route: Any) -> None:
        parts = urlsplit(route.request.url)
        query = rewrite(dict(parse_qsl(parts.query)))
        await route.continue_(url=parts._replace(query=urlencode(query)).geturl())

    await tab.page.route(re.compile(r"/authorize\?"), handle)


async def test_single_sign_on_signs_in_as_the_providers_subject_and_lists_sessions(
    tab: Tab, provider: OidcProvider
) -> None:
    page = tab.page
    authorize_requests: list[str] = []
    page.on("request", lambda r: authorize_requests.append(r.url) if "/authorize" in r.url else None)
    await page.goto(tab.url + "/")
    await expect(page.get_by_role("heading", name="AstraBox console")).to_be_visible()
    await expect(page.get_by_label("API key")).to_be_visible()  # keys are still offered
    await tab.shot("offered")
    await page.get_by_role("button", name=SSO_BUTTON).click()

    whoami = page.get_by_test_id("whoami")
    await expect(whoami).to_contain_text(f"{provider.subject}: admin of project default")
    await expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    await expect(page.get_by_role("cell", name="No sessions.")).to_be_visible()  # ListSessions answered it
    await tab.shot("signed-in")
    # The code and state left the address bar; what the flow kept is gone; the ID token is the credential.
    assert page.url == f"{tab.url}/"
    assert await tab.storage("astrabox.signOn") is None
    credential = await tab.storage("astrabox.apiKey")
    assert credential is not None and credential.count(".") == 2
    assert provider.tokens_issued == 1
    # What the browser sent the provider: PKCE with S256, a state and a nonce, this console's redirect URI.
    [sent] = authorize_requests
    query = dict(parse_qsl(urlsplit(sent).query))
    assert query["response_type"] == "code" and query["client_id"] == CLIENT
    assert query["redirect_uri"] == f"{tab.url}/"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert len(query["state"]) >= 32 and len(query["nonce"]) >= 32
    assert query["scope"] == "openid profile email"

    # A reload stays signed in (the tab's session storage); signing out forgets the token.
    await page.reload()
    await expect(whoami).to_contain_text(provider.subject)
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("button", name=SSO_BUTTON)).to_be_visible()
    assert await tab.storage("astrabox.apiKey") is None
    tab.check_clean()


async def test_an_answer_whose_state_was_tampered_with_is_refused(tab: Tab, provider: OidcProvider) -> None:
    page = tab.page

    # The provider's answer comes back with another state than the one this tab sent: someone else's
    # code, say, slipped to the browser. It is refused and its code never redeemed.
    async def tamper(route: Any) -> None:
        answer = await route.fetch(max_redirects=0)
        location = urlsplit(answer.headers["location"])
        returned = dict(parse_qsl(location.query))
        assert "code" in returned
        returned["state"] = "tampered-" + returned["state"]
        await route.fulfill(status=302, headers={"Location": location._replace(query=urlencode(returned)).geturl()})

    await page.route(re.compile(r"/authorize\?"), tamper)
    await page.goto(tab.url + "/")
    await page.get_by_role("button", name=SSO_BUTTON).click()
    await expect(page.get_by_role("alert")).to_contain_text("state mismatch")
    await expect(page.get_by_role("button", name=SSO_BUTTON)).to_be_visible()
    await tab.shot("refused")
    assert provider.tokens_issued == 0
    assert page.url == f"{tab.url}/"  # the refused code left the address bar too
    assert await tab.storage("astrabox.apiKey") is None
    assert await tab.storage("astrabox.signOn") is None

    # A code arriving in a tab that started no sign-in is refused as well.
    await page.unroute(re.compile(r"/authorize\?"))
    await page.goto(tab.url + "/?code=someone-elses-code&state=whatever")
    await expect(page.get_by_role("alert")).to_contain_text("started no sign-in")
    assert provider.tokens_issued == 0

    # And after all that a proper sign-in still works.
    await page.get_by_role("button", name=SSO_BUTTON).click()
    await expect(page.get_by_test_id("whoami")).to_contain_text(provider.subject)
    tab.check_clean()


async def test_the_providers_error_is_shown(tab: Tab, provider: OidcProvider) -> None:
    page = tab.page
    # A request the provider refuses (no PKCE method it accepts): it sends the browser back with
    # `error=invalid_request`.
    await redirect_authorization(tab, lambda query: {**query, "code_challenge_method": "plain"})
    await page.goto(tab.url + "/")
    await page.get_by_role("button", name=SSO_BUTTON).click()
    alert = page.get_by_role("alert")
    await expect(alert).to_contain_text("The sign-on provider refused: invalid_request")
    await expect(page.get_by_label("API key")).to_be_visible()
    await tab.shot("provider-error")
    assert page.url == f"{tab.url}/"
    assert provider.tokens_issued == 0
    tab.check_clean()


async def test_an_expired_sign_in_goes_back_to_the_sign_in_screen_saying_so(tab: Tab, provider: OidcProvider) -> None:
    page = tab.page
    expires = int(time.time()) + 6
    provider.claims = {**provider.claims, "exp": expires}
    await page.goto(tab.url + "/")
    await page.get_by_role("button", name=SSO_BUTTON).click()
    await expect(page.get_by_test_id("whoami")).to_contain_text(provider.subject)
    await asyncio.sleep(max(0.0, expires - time.time()) + 1.5)
    # The next call (the agents screen lists agents) is refused: the console goes back to sign-in.
    await page.get_by_role("link", name="Agents").click()
    alert = page.get_by_role("alert")
    await expect(alert).to_contain_text("Your sign-in has expired")
    await expect(alert).to_contain_text("CREDENTIALS_EXPIRED")
    await expect(page.get_by_role("button", name=SSO_BUTTON)).to_be_visible()
    await tab.shot("expired")
    assert await tab.storage("astrabox.apiKey") is None
    tab.check_clean()


async def test_a_provider_that_cannot_be_reached_leaves_keys_and_says_why(
    browser: Any, database_url: str, tmp_path: Path
) -> None:
    # Nothing listens on the discard port: the control plane cannot read the discovery document.
    async with control_plane(database_url, tmp_path, "http://127.0.0.1:9", {"keys": []}) as url:
        context = await browser.new_context()
        try:
            page = await context.new_page()
            await page.goto(url + "/")
            unavailable = page.get_by_test_id("sso-unavailable")
            await expect(unavailable).to_contain_text("Single sign-on is configured but unavailable")
            await expect(unavailable).to_contain_text("127.0.0.1:9")
            await expect(page.get_by_role("button", name=SSO_BUTTON)).to_have_count(0)
            await expect(page.get_by_label("API key")).to_be_visible()
        finally:
            await context.close()
