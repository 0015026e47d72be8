"""The console in a real browser (Debian's chromium through Playwright) against a real stack:
`astrabox up` with its web port, the offline model, the local sandbox. Each test does what a
person would and asserts what they would see: signing in, a session's turn arriving live, a tool
call approved, a question answered, workspace files browsed, downloaded and uploaded, an agent
file applied and its versions compared, and an engine's hostile text shown inert.

Screenshots of each step go to $ASTRABOX_TEST_ARTIFACTS/console (else the test's tmp directory);
the test prints where.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cutting_proxy import cutting_proxy
from tests.support.processes import Process

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CONSOLE_BUILT = Path(__file__).resolve().parents[2] / "controlplane" / "web" / "console" / "index.html"
# Offline-model turns are quick, but a session's first start (sandbox, CLI) takes a while.
TURN_TIMEOUT_MS = 120_000

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium; scripts/test does as root)"
    ),
    pytest.mark.skipif(not CONSOLE_BUILT.exists(), reason="the console is not built (scripts/build-console)"),
]

playwright_sync = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
expect = playwright_sync.expect


@dataclass
class ConsoleStack:
    url: str
    api_key: str
    process: Process


@pytest.fixture(scope="module")
def console_stack() -> Iterator[ConsoleStack]:
    """`astrabox up` with its web port on a free loopback port, in a scratch directory."""
    # Not under pytest's tmp directory (0700): a root stack runs its embedded PostgreSQL as `postgres`.
    scratch = Path(tempfile.mkdtemp(prefix="astrabox-console-"))
    scratch.chmod(0o711)
    data_dir = scratch / "data"
    dropped = {
        "ASTRABOX_DATABASE_URL",
        "ASTRABOX_DATABASE_URL_FILE",
        "ASTRABOX_BOOTSTRAP_KEY_FILE",
        "ASTRABOX_API_KEY",
        "ASTRABOX_API_KEY_FILE",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_API_KEY_FILE",
        "ASTRABOX_MODEL_BASE_URL",
    }
    saved = {name: os.environ.pop(name) for name in dropped if name in os.environ}
    try:
        process = Process(
            "astrabox-up",
            [
                sys.executable,
                "-m",
                "astrabox",
                "up",
                "--data-dir",
                str(data_dir),
                "--listen",
                "127.0.0.1:0",
                "--web-listen",
                "127.0.0.1:0",
            ],
            scratch / "astrabox-up.log",
            env={"XDG_CONFIG_HOME": str(scratch / "config")},
        )
    finally:
        os.environ.update(saved)
    try:
        url = process.wait_for_line(r"console: (http://\S+)", timeout=180).group(1)
        process.wait_for_line(r"AstraBox is up on", timeout=60)
        api_key = (data_dir / "admin-key").read_text().strip()
        yield ConsoleStack(url.rstrip("/"), api_key, process)
    finally:
        process.stop(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(console_stack: ConsoleStack) -> Iterator[Any]:
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = os.environ.get("ASTRABOX_TEST_ARTIFACTS")
    directory = Path(base) / "console" if base else tmp_path_factory.mktemp("console-artifacts")
    directory.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots: {directory}", file=sys.stderr)
    return directory


class Console:
    """A browser tab on the console, with what it logged (CSP violations, errors)."""

    def __init__(self, page: Any, stack: ConsoleStack, artifacts: Path, name: str, base: str = "") -> None:
        self.page = page
        self.stack = stack
        self.base = base or stack.url
        self.artifacts = artifacts
        self.name = name
        self.shots = 0
        self.problems: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))

    def _on_console(self, message: Any) -> None:
        text = message.text
        if "Content Security Policy" in text or "Refused to" in text:
            self.problems.append(f"CSP: {text}")

    def shot(self, step: str) -> None:
        self.shots += 1
        path = self.artifacts / f"{self.name}-{self.shots:02d}-{step}.png"
        self.page.screenshot(path=str(path), full_page=True)

    def sign_in(self) -> None:
        page = self.page
        page.goto(self.base + "/")
        page.get_by_label("API key").fill(self.stack.api_key)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_test_id("whoami")).to_contain_text("admin of project default")

    def create_session(self, *, permission_mode: str = "", first_message: str = "") -> str:
        page = self.page
        page.goto(self.base + "/#/sessions")
        form = page.get_by_role("region", name="New session")
        if permission_mode:
            form.get_by_label("Permission mode").fill(permission_mode)
        if first_message:
            form.get_by_label("First message").fill(first_message)
        form.get_by_role("button", name="Create session").click()
        expect(page).to_have_url(re.compile(r"#/sessions/[0-9a-f-]{36}$"))
        return str(page.url).rsplit("/", 1)[1]

    def send(self, text: str) -> None:
        self.page.get_by_label("Message", exact=True).fill(text)
        self.page.get_by_role("button", name="Send", exact=True).click()

    def check_clean(self) -> None:
        assert not self.problems, self.problems


@pytest.fixture
def console(
    browser: Any, console_stack: ConsoleStack, artifacts: Path, request: pytest.FixtureRequest
) -> Iterator[Console]:
    context = browser.new_context(viewport={"width": 1366, "height": 768}, accept_downloads=True)
    context.set_default_timeout(30_000)
    page = context.new_page()
    tab = Console(page, console_stack, artifacts, request.node.name)
    try:
        yield tab
    finally:
        try:
            tab.shot("end")
        finally:
            context.close()


def test_sign_in_shows_who_you_are_keeps_the_key_in_the_tab_and_signs_out(console: Console) -> None:
    page = console.page
    page.goto(console.stack.url + "/")
    expect(page.get_by_role("heading", name="AstraBox console")).to_be_visible()
    # A wrong key is refused, saying why, and nothing is kept.
    page.get_by_label("API key").fill("abx_nosuchkey_secret")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("UNAUTHENTICATED")
    assert page.evaluate("sessionStorage.getItem('astrabox.apiKey')") is None
    console.shot("refused")

    console.sign_in()
    assert page.evaluate("sessionStorage.getItem('astrabox.apiKey')") == console.stack.api_key
    assert page.evaluate("document.cookie") == ""
    expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    console.shot("signed-in")
    # A reload keeps the tab signed in (session storage), and signing out forgets the key.
    page.reload()
    expect(page.get_by_test_id("whoami")).to_contain_text("(operator)")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API key")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('astrabox.apiKey')") is None
    console.check_clean()


def test_a_turn_arrives_live_a_tool_call_is_approved_and_a_question_answered(console: Console) -> None:
    page = console.page
    console.sign_in()
    # Mode `default` asks before a tool that changes something: the Bash call waits for an approval.
    session_id = console.create_session(
        permission_mode="default", first_message="run: touch approved.txt && echo approved-by-a-person"
    )
    expect(page.get_by_role("heading", name=f"Session {session_id[:8]}")).to_be_visible()
    expect(page.get_by_test_id("watch-status")).to_have_text("Live")
    panel = page.get_by_test_id("interaction")
    expect(panel.get_by_role("heading", name="Approve Bash?")).to_be_visible(timeout=TURN_TIMEOUT_MS)
    expect(panel).to_contain_text("touch approved.txt && echo approved-by-a-person")
    console.shot("approval")
    panel.get_by_role("button", name="Allow once").click()
    transcript = page.get_by_role("log", name="Transcript")
    tool = transcript.get_by_test_id("tool-call").last
    expect(tool).to_contain_text("done", timeout=TURN_TIMEOUT_MS)
    tool.locator("summary").click()  # the call and its result fold together
    expect(tool.locator(".tool-result")).to_have_text(re.compile(r"approved-by-a-person"))
    expect(transcript.get_by_test_id("turn-end").last).to_contain_text("Turn completed", timeout=TURN_TIMEOUT_MS)
    expect(transcript.get_by_test_id("turn-end").last).to_contain_text("tokens")
    expect(transcript).to_contain_text("Allowed")
    console.shot("approved")

    # A question: the options are offered, the chosen one answers it, the agent says so live.
    console.send("ask: Which colour? Red|Blue")
    expect(panel.get_by_role("heading", name="The agent asks")).to_be_visible(timeout=TURN_TIMEOUT_MS)
    group = panel.get_by_role("group", name=re.compile("Which colour"))
    expect(group.get_by_role("radio", name="Blue")).to_be_visible()
    group.get_by_role("radio", name="Red").check()
    console.shot("question")
    panel.get_by_role("button", name="Send answer").click()
    expect(transcript).to_contain_text("Which colour? → Red", timeout=TURN_TIMEOUT_MS)
    expect(transcript.locator(".msg-assistant").last).to_contain_text("Red", timeout=TURN_TIMEOUT_MS)
    expect(transcript.get_by_test_id("turn-end")).to_have_count(2, timeout=TURN_TIMEOUT_MS)
    expect(page.get_by_test_id("session-state")).to_have_text("ready")
    expect(page.get_by_test_id("session-usage")).to_contain_text("2 turns")
    # Every event shown once: the seqs in the transcript are distinct and increasing.
    seqs = [int(s) for s in transcript.locator("[data-seq]").evaluate_all("els => els.map(e => e.dataset.seq)")]
    assert seqs == sorted(seqs) and len({(s, i) for i, s in enumerate(seqs)}) == len(seqs)
    console.shot("answered")

    # The session is listed with its state and usage.
    page.goto(console.stack.url + "/#/sessions")
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=session_id[:8]))
    expect(row).to_contain_text("ready")
    expect(row).to_contain_text("2 turns")
    console.shot("listed")
    console.check_clean()


def test_a_watch_cut_again_and_again_resumes_with_nothing_missing_or_doubled(
    browser: Any, console_stack: ConsoleStack, artifacts: Path
) -> None:
    # The browser reaches the console through a proxy that can cut its connections: on [::1] with
    # the web port's number, an origin the web API takes as the console's own.
    port = int(console_stack.url.rsplit(":", 1)[1])
    with cutting_proxy(f"127.0.0.1:{port}", host="::1", port=port) as proxy:
        context = browser.new_context(viewport={"width": 1366, "height": 768})
        context.set_default_timeout(30_000)
        console = Console(context.new_page(), console_stack, artifacts, "cut-watch", base=f"http://{proxy.address}")
        try:
            page = console.page
            console.sign_in()
            console.create_session(first_message="run: echo first-turn")
            transcript = page.get_by_role("log", name="Transcript")
            expect(transcript.get_by_test_id("turn-end")).to_have_count(1, timeout=TURN_TIMEOUT_MS)
            # Five Bash steps, a few seconds in all; the watch is cut under it every half second.
            console.send("steps: 5")
            expect(page.get_by_label("Message", exact=True)).to_have_value("")  # the send went through
            cuts = 0
            while transcript.get_by_test_id("turn-end").count() < 2 and cuts < 60:
                time.sleep(0.5)
                proxy.cut()
                cuts += 1
            expect(transcript.get_by_test_id("turn-end")).to_have_count(2, timeout=TURN_TIMEOUT_MS)
            expect(page.get_by_test_id("watch-status")).to_contain_text("resumed", timeout=30_000)
            console.shot("resumed")
            # Every step once, each call with its result, the turn's text once.
            tools = transcript.get_by_test_id("tool-call")
            expect(tools).to_have_count(6)  # echo first-turn, then the five steps
            for i in range(1, 6):
                expect(tools.filter(has_text=f"echo step {i}")).to_have_count(1)
            expect(transcript.get_by_test_id("tool-call").filter(has_text="running")).to_have_count(0)
            expect(transcript.locator(".msg-assistant", has_text="Finished 5 steps.")).to_have_count(1)
            expect(transcript.locator(".msg-user")).to_have_count(2)
            seqs = [int(s) for s in transcript.locator("[data-seq]").evaluate_all("els => els.map(e => e.dataset.seq)")]
            assert seqs == sorted(seqs), seqs
            assert proxy.connections > cuts // 2  # the watch did reconnect through the cuts
            console.check_clean()
        finally:
            try:
                console.shot("end")
            finally:
                context.close()


def test_workspace_files_are_browsed_downloaded_and_uploaded(console: Console, tmp_path: Path) -> None:
    page = console.page
    console.sign_in()
    console.create_session(first_message="run: mkdir -p notes && printf 'from the sandbox\\n' > notes/hello.txt")
    transcript = page.get_by_role("log", name="Transcript")
    expect(transcript.get_by_test_id("turn-end")).to_have_count(1, timeout=TURN_TIMEOUT_MS)
    workspace = page.get_by_role("region", name="Workspace")
    workspace.get_by_role("button", name="Refresh").click()
    workspace.get_by_role("button", name="notes/").click()
    expect(workspace.get_by_role("navigation", name="Workspace path")).to_contain_text("notes")
    expect(workspace.get_by_role("cell", name="hello.txt", exact=True)).to_be_visible()
    console.shot("browsed")
    with page.expect_download() as downloading:
        workspace.get_by_role("button", name="Download hello.txt").click()
    download = downloading.value
    assert download.suggested_filename == "hello.txt"
    saved = tmp_path / "hello.txt"
    download.save_as(saved)
    assert saved.read_text() == "from the sandbox\n"

    workspace.get_by_label(re.compile("Upload files to /workspace/notes")).set_input_files(
        [{"name": "uploaded.txt", "mimeType": "text/plain", "buffer": b"from the browser\n"}]
    )
    workspace.get_by_role("button", name="Upload", exact=True).click()
    expect(workspace.get_by_role("status")).to_contain_text("Uploaded 1 entries")
    expect(workspace.get_by_role("cell", name="uploaded.txt", exact=True)).to_be_visible()
    console.shot("uploaded")
    # What was uploaded is in the sandbox: the agent reads it.
    console.send("run: cat notes/uploaded.txt")
    expect(transcript.get_by_test_id("turn-end")).to_have_count(2, timeout=TURN_TIMEOUT_MS)
    tool = transcript.get_by_test_id("tool-call").last
    tool.locator("summary").click()
    expect(tool.locator(".tool-result")).to_contain_text("from the browser")
    console.check_clean()


AGENT_V1 = """\
name: console-tester
description: Made by the console test
permission_mode: default
tools:
  default: ask
  rules:
    - {tool: Read, policy: allow}
limits: {max_turns: 5, turn_timeout: 10m}
"""

AGENT_V2 = AGENT_V1.replace("Made by the console test", "Changed by the console test").replace(
    "max_turns: 5", "max_turns: 7"
)


def test_an_agent_file_is_applied_and_its_versions_compared(console: Console) -> None:
    page = console.page
    console.sign_in()
    page.get_by_role("link", name="Agents").click()
    apply = page.get_by_role("region", name="Apply an agent file")
    # A mistake is named with its line before anything is sent.
    apply.get_by_label(re.compile("Agent YAML")).fill("name: console-tester\ntools:\n  defualt: ask\n")
    apply.get_by_role("button", name="Apply").click()
    expect(apply.get_by_role("alert")).to_contain_text("line 3")
    expect(apply.get_by_role("alert")).to_contain_text("defualt")

    apply.get_by_label(re.compile("Agent YAML")).fill(AGENT_V1)
    apply.get_by_role("button", name="Apply").click()
    expect(apply.get_by_test_id("apply-results")).to_contain_text("created console-tester v1")
    apply.get_by_role("button", name="Apply").click()
    expect(apply.get_by_test_id("apply-results")).to_contain_text("console-tester v1 (unchanged)")
    apply.get_by_label(re.compile("Agent YAML")).fill(AGENT_V2)
    apply.get_by_role("button", name="Apply").click()
    expect(apply.get_by_test_id("apply-results")).to_contain_text("console-tester v2 (new version)")
    console.shot("applied")

    page.get_by_role("link", name="console-tester").click()
    versions = page.get_by_role("region", name="console-tester: versions")
    expect(versions.get_by_role("cell", name="v2")).to_be_visible()
    expect(versions.get_by_role("cell", name="v1")).to_be_visible()
    diff = versions.get_by_test_id("agent-diff")
    expect(diff.locator(".removed", has_text="description")).to_have_text("- description: Made by the console test\n")
    expect(diff.locator(".added", has_text="description")).to_have_text("+ description: Changed by the console test\n")
    expect(diff.locator(".removed", has_text="max_turns")).to_contain_text("max_turns: 5")
    expect(diff.locator(".added", has_text="max_turns")).to_contain_text("max_turns: 7")
    console.shot("diff")

    # A session from it pins the version.
    console.page.goto(console.stack.url + "/#/sessions")
    form = page.get_by_role("region", name="New session")
    form.get_by_label("Agent", exact=True).select_option("console-tester")
    form.get_by_role("button", name="Create session").click()
    expect(page).to_have_url(re.compile(r"#/sessions/[0-9a-f-]{36}$"))
    expect(page.get_by_role("heading", name=re.compile("Session"))).to_be_visible()
    expect(page.locator(".facts")).to_contain_text("console-tester v2")
    console.check_clean()


HOSTILE = '<script>window.pwned=1</script> <a href="javascript:alert(1)">x</a> <img src=x onerror="window.pwned=2">'


def test_an_engines_markup_and_javascript_links_render_inert(console: Console) -> None:
    page = console.page
    console.sign_in()
    console.create_session(first_message=f"run: echo '{HOSTILE}' https://example.com/docs")
    transcript = page.get_by_role("log", name="Transcript")
    expect(transcript.get_by_test_id("turn-end")).to_have_count(1, timeout=TURN_TIMEOUT_MS)
    tool = transcript.get_by_test_id("tool-call").last
    tool.locator("summary").click()
    # The markup is shown as the text it is ...
    expect(tool.locator(".tool-result")).to_contain_text("<script>window.pwned=1</script>")
    expect(transcript).to_contain_text('<a href="javascript:alert(1)">x</a>')
    console.shot("inert")
    # ... and nothing of it ran or became an element.
    assert page.evaluate("window.pwned") is None
    assert page.locator("a[href^='javascript:' i]").count() == 0
    assert transcript.locator("script, img, iframe").count() == 0
    for href in page.locator("a[href]").evaluate_all("els => els.map(e => e.getAttribute('href'))"):
        assert href.startswith(("#", "http://", "https://")), href
    external = transcript.locator("a[href^='https://']")
    for i in range(external.count()):
        assert set((external.nth(i).get_attribute("rel") or "").split()) >= {"noopener", "noreferrer"}
    console.check_clean()


def test_an_operator_sees_the_hosts_and_makes_a_key_shown_once_then_revokes_it(
    console: Console, browser: Any, console_stack: ConsoleStack, artifacts: Path
) -> None:
    page = console.page
    console.sign_in()
    page.get_by_role("link", name="Operators").click()
    hosts = page.get_by_role("region", name="Hosts")
    expect(hosts.get_by_role("row").filter(has_text="local")).to_contain_text("connected")

    keys = page.get_by_role("region", name="API keys")
    keys.get_by_label("Name").fill("console-test-key")
    keys.get_by_label("Role").select_option(label="developer")
    keys.get_by_role("button", name="Create key").click()
    secret = keys.get_by_label("New key").input_value()
    assert secret.startswith("abx_"), secret
    key_id = secret.split("_")[1]
    expect(keys.get_by_role("row").filter(has_text=key_id)).to_contain_text("developer")
    console.shot("key-created")
    keys.get_by_role("button", name="Done").click()
    expect(keys.get_by_label("New key")).to_have_count(0)  # shown once: gone for good

    # The new key signs in elsewhere as what it is: a developer, who has no operators' screen.
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        other = context.new_page()
        other.goto(console_stack.url + "/")
        other.get_by_label("API key").fill(secret)
        other.get_by_role("button", name="Sign in").click()
        expect(other.get_by_test_id("whoami")).to_contain_text(f"key {key_id}: developer of project default")
        expect(other.get_by_role("link", name="Operators")).to_have_count(0)
    finally:
        context.close()

    page.once("dialog", lambda dialog: dialog.accept())
    keys.get_by_role("button", name=f"Revoke key {key_id}").click()
    expect(keys.get_by_role("row").filter(has_text=key_id)).to_contain_text("revoked")
    page.reload()
    audit = page.get_by_role("region", name="Audit trail")
    expect(audit.get_by_role("row").filter(has_text="RevokeApiKey").first).to_contain_text("OK")
    expect(audit.get_by_role("row").filter(has_text="CreateApiKey").first).to_contain_text("OK")
    console.shot("revoked")
    console.check_clean()


def connect_call(stack: ConsoleStack, method: str, request: dict[str, Any]) -> dict[str, Any]:
    """A unary call on the web API as a program makes it (Connect JSON, no Origin)."""
    call = urllib.request.Request(
        f"{stack.url}/{method}",
        data=json.dumps(request).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {stack.api_key}"},
        method="POST",
    )
    with urllib.request.urlopen(call, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def test_an_environments_versions_are_shown_and_a_build_followed_to_its_end(console: Console) -> None:
    connect_call(
        console.stack,
        "astrabox.environments.v1.EnvironmentService/CreateEnvironment",
        {
            "requestId": "console-env-1",
            "name": "console-env",
            "spec": {"variables": {"GREETING": "hello"}, "setupScript": "echo set up by the console test"},
        },
    )
    page = console.page
    console.sign_in()
    page.get_by_role("link", name="Environments").click()
    page.get_by_role("link", name="console-env").click()
    versions = page.get_by_role("region", name="console-env: versions")
    expect(versions.locator(".definition")).to_contain_text('"GREETING": "hello"')
    versions.get_by_role("button", name="Build v1").click()
    steps = versions.get_by_role("list", name="Build steps")
    expect(steps.locator("li").last).to_contain_text("ready", timeout=TURN_TIMEOUT_MS)
    expect(versions.get_by_role("button", name="Build v1")).to_be_enabled()
    console.shot("built")
    # The session list offers it to new sessions.
    page.get_by_role("link", name="Sessions").click()
    expect(page.get_by_label("Environment")).to_contain_text("console-env")
    console.check_clean()
