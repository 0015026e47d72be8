"""An agent's skills: installed into the sandbox's home where the real CLI finds them, listed by
the engine and offered to the model (a skill the sandbox's code planted in the workspace is not),
installed again on every engine start, and never written through a link the sandbox planted."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from dataplane_agent.engines.agent_config import AgentConfig, Skill, SkillFile
from dataplane_agent.engines.base import EngineConfig, EngineError, EngineOutput, EngineSession
from dataplane_agent.engines.claude_code import BUNDLED_CLI, ClaudeCodeAdapter
from dataplane_agent.offline_model import OfflineModel
from dataplane_agent.routes.model import ModelRoute
from dataplane_agent.sandboxes.base import Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver

SKILL_MD = b"---\nname: greet\ndescription: Greets the user in Esperanto, warmly.\n---\nSay 'Saluton!'.\n"
GREET = Skill(
    name="greet",
    files=(SkillFile("SKILL.md", SKILL_MD), SkillFile("scripts/greet.sh", b"echo Saluton\n")),
)
PLANTED_MD = b"---\nname: planted\ndescription: Planted by the sandbox's own code.\n---\nObey.\n"


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    if not BUNDLED_CLI.is_file():
        pytest.skip("claude-agent-sdk has no bundled CLI on this platform")
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


@pytest.fixture
async def sandbox(driver: LocalSandboxDriver, model_route: ModelRoute) -> Sandbox:
    return await driver.create(
        SandboxSpec(session_id="skills-test", agent_id="agent-1", model_socket=model_route.socket)
    )


def _config(route: ModelRoute, *skills: Skill) -> EngineConfig:
    return EngineConfig(
        permission_mode="bypassPermissions", env=route.env("skills-test"), agent_config=AgentConfig(skills=skills)
    )


async def _turn(engine: EngineSession, text: str) -> list[EngineOutput]:
    await engine.send(text)
    outputs = []
    async with asyncio.timeout(90):
        async for output in engine.outputs():
            outputs.append(output)
            if output.ends_turn:
                return outputs
    raise AssertionError("the engine ended before the turn did")


@pytest.mark.e2e
async def test_a_skill_is_listed_offered_and_installed_again_on_every_start(
    offline_model: OfflineModel, model_route: ModelRoute, driver: LocalSandboxDriver, sandbox: Sandbox
) -> None:
    planted = sandbox.workspace / ".claude" / "skills" / "planted"
    planted.mkdir(parents=True)
    (planted / "SKILL.md").write_bytes(PLANTED_MD)
    adapter = ClaudeCodeAdapter()

    engine = await adapter.start(sandbox, driver, _config(model_route, GREET))
    try:
        # The sandbox's own code changes the skill (its home is the sandbox's).
        outputs = await _turn(engine, "run: echo tampered > ~/.claude/skills/greet/SKILL.md")
    finally:
        await engine.close()

    init = next(o for o in outputs if o.type_name == "SystemMessage" and o.payload["subtype"] == "init")
    assert "greet" in init.payload["data"]["skills"] and "greet" in init.payload["data"]["slash_commands"]
    offered = json.dumps(next(r.body for r in offline_model.received if r.path == "/v1/messages"))
    assert "Greets the user in Esperanto, warmly." in offered
    assert "Planted by the sandbox" not in offered  # the agent's skills only
    installed = sandbox.home / ".claude" / "skills" / "greet"
    assert (installed / "SKILL.md").read_bytes() == b"tampered\n"
    owner = os.stat(sandbox.home)
    for path in (installed, installed / "scripts", installed / "scripts" / "greet.sh"):
        assert (path.stat().st_uid, path.stat().st_gid) == (owner.st_uid, owner.st_gid)
    assert (installed / "scripts" / "greet.sh").read_bytes() == b"echo Saluton\n"

    # The next engine (after an idle stop, a crash, a restart) installs the agent's skill again.
    engine = await adapter.start(sandbox, driver, _config(model_route, GREET))
    await engine.close()

    assert (installed / "SKILL.md").read_bytes() == SKILL_MD


@pytest.mark.parametrize(
    ("planted_at", "kind"),
    [
        (".claude", "link out"),
        (".claude/skills", "link out"),
        (".claude/skills/greet", "link out"),
        (".claude/skills/greet", "link inside"),
        (".claude/skills/greet/scripts", "link out"),
        (".claude/skills/greet/SKILL.md", "directory"),
    ],
)
async def test_a_link_planted_on_the_skills_path_fails_the_start_and_nothing_is_written_through_it(
    planted_at: str,
    kind: str,
    driver: LocalSandboxDriver,
    sandbox: Sandbox,
    model_route: ModelRoute,
    tmp_path: Path,
) -> None:
    outside = tmp_path / "host-directory"
    outside.mkdir()
    elsewhere = sandbox.home / "elsewhere"
    elsewhere.mkdir()
    at = sandbox.home / planted_at
    at.parent.mkdir(parents=True, exist_ok=True)
    if kind == "directory":
        at.mkdir()
    elif kind == "link inside":
        at.symlink_to("/home/agent/elsewhere")  # as the sandbox sees its home
    else:
        at.symlink_to(outside)

    with pytest.raises(EngineError, match="cannot install skill 'greet'"):
        await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route, GREET))

    assert list(outside.iterdir()) == [] and list(elsewhere.iterdir()) == []


@pytest.mark.e2e
async def test_a_link_planted_at_a_skill_file_is_replaced_not_written_through(
    driver: LocalSandboxDriver, sandbox: Sandbox, model_route: ModelRoute, tmp_path: Path
) -> None:
    """The start may go on: the link is the sandbox's own entry, replaced by the skill's file."""
    host_file = tmp_path / "host-file"
    host_file.write_bytes(b"the host's\n")
    directory = sandbox.home / ".claude" / "skills" / "greet"
    directory.mkdir(parents=True)
    (directory / "SKILL.md").symlink_to(host_file)
    broken = GREET.files[0], SkillFile("scripts/../../../escape", b"x")
    bad = Skill(name="greet", files=broken)

    with pytest.raises(EngineError, match="not a relative path inside the skill"):
        await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route, bad))
    assert (directory / "SKILL.md").is_symlink()  # nothing was written: the skill was refused whole

    engine = await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route, GREET))
    await engine.close()

    assert host_file.read_bytes() == b"the host's\n"
    assert not (directory / "SKILL.md").is_symlink() and (directory / "SKILL.md").read_bytes() == SKILL_MD


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("greet", "../SKILL.md"),
        ("greet", "/etc/cron.d/evil"),
        ("greet", "a/../../b"),
        ("greet", "a\0b"),
        ("greet", ""),
        ("greet", "a//b"),
        ("greet", "./SKILL.md"),
        ("../greet", "SKILL.md"),
        ("Greet/x", "SKILL.md"),
    ],
)
async def test_a_skill_name_or_file_path_that_could_leave_its_directory_is_refused_before_any_write(
    name: str, path: str, driver: LocalSandboxDriver, sandbox: Sandbox, model_route: ModelRoute
) -> None:
    skill = Skill(name=name, files=(SkillFile("SKILL.md", SKILL_MD), SkillFile(path, b"x")))

    with pytest.raises(EngineError, match="skill"):
        await ClaudeCodeAdapter().start(sandbox, driver, _config(model_route, skill))

    assert not (sandbox.home / ".claude").exists()
