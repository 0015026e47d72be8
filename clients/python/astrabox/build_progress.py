"""How `astrabox environments build` (and `apply`) show a layer build as it streams: a bar per agent.

On a terminal each agent has one line, redrawn in place as its steps come (carriage return and
cursor-up, no library: the client depends on none for this). Anywhere else (a pipe, a CI log) each
step is one line of its own, so nothing is lost and nothing is overwritten. Either way an agent's
last line says READY, or FAILED with the package manager's own error below it, indented.
"""

from __future__ import annotations

from typing import TextIO

from astrabox.environment_definitions import BuildProgress

__all__ = ["BuildView"]

_BAR = 24
_UP = "\x1b[{}A"
_CLEAR = "\r\x1b[K"


def _bar(percent: int) -> str:
    filled = max(0, min(_BAR, percent * _BAR // 100))
    return "[" + "#" * filled + "-" * (_BAR - filled) + f"] {percent:3d}%"


def _step(progress: BuildProgress) -> str:
    detail = f"  {progress.message}" if progress.message else ""
    return f"{progress.phase:<8}{detail}"


class BuildView:
    """Shows the steps of one build, agent by agent, on `out` (redrawn in place when `tty`)."""

    def __init__(self, out: TextIO, *, tty: bool) -> None:
        self._out = out
        self._tty = tty
        self._lines: dict[str, str] = {}  # agent id -> its current line (tty)
        self._drawn = 0
        self.failed: list[BuildProgress] = []
        self.ready: list[BuildProgress] = []
        self._last: dict[str, BuildProgress] = {}  # agent id -> its latest step

    def show(self, progress: BuildProgress) -> None:
        """One step of one agent's build."""
        self._last[progress.agent_id] = progress
        if progress.state == "failed":
            self.failed.append(progress)
            line = f"{progress.agent_id}  FAILED ({progress.phase})"
        elif progress.state == "ready":
            self.ready.append(progress)
            line = f"{progress.agent_id}  {_bar(100)} READY  layer {progress.build_digest[:16]}"
        else:
            line = f"{progress.agent_id}  {_bar(progress.percent)} {_step(progress)}"
        if self._tty:
            self._lines[progress.agent_id] = line[:200]
            self._redraw()
        else:
            print(line, file=self._out, flush=True)
        if progress.state == "failed":
            self._error(progress.agent_id, progress.error)

    def building(self) -> dict[str, str]:
        """The agents seen building and not yet READY or FAILED, each with its latest step
        ("pip 40%")."""
        return {agent: f"{step.phase} {step.percent}%" for agent, step in self._last.items() if not step.done}

    def _redraw(self) -> None:
        text = _UP.format(self._drawn) if self._drawn else ""
        text += "".join(f"{_CLEAR}{line}\n" for line in self._lines.values())
        self._drawn = len(self._lines)
        self._out.write(text)
        self._out.flush()

    def _error(self, agent_id: str, error: str) -> None:
        """The package manager's words, below the agent's line. On a terminal they stay where they are
        written: the agent's line is no longer redrawn, the other agents' bars are drawn anew below."""
        text = "".join(f"    {line}\n" for line in (error or "(no error text)").rstrip("\n").splitlines())
        self._out.write(text)
        self._out.flush()
        if self._tty:
            self._lines.pop(agent_id, None)
            self._drawn = 0
            if self._lines:
                self._redraw()
