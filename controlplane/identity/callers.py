"""Who makes a call: the `Caller` a credential stands for, and the call's own.

The authenticator (`identity.authenticator`) sets the caller of each call
before its handler runs; handlers read it with `current()`. A handler reached
without one is a wiring bug, and `current()` refuses rather than guess.
"""

from __future__ import annotations

import contextvars
import enum
import uuid
from dataclasses import dataclass


class Role(enum.IntEnum):
    """What a key may do in its project; each role includes the ones below it (the values order
    them and are AdminService's Role numbers)."""

    VIEWER = 1
    DEVELOPER = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> Role:
        return cls[label.upper()]


@dataclass(frozen=True, slots=True)
class Caller:
    project_id: uuid.UUID
    project_name: str
    role: Role
    # The key the call was made with (never its secret); empty for a single-sign-on token.
    key_id: str
    # The project's admins manage every project.
    operator: bool = False
    # A single-sign-on token's subject (its `sub` claim); empty for an API key.
    subject: str = ""

    @property
    def who(self) -> str:
        """How audit records and logs name the caller."""
        return f"key:{self.key_id}" if self.key_id else f"oidc:{self.subject}"

    def manages(self, project_id: uuid.UUID) -> bool:
        """Whether the caller may administer `project_id` (its keys)."""
        return self.role >= Role.ADMIN and (self.operator or project_id == self.project_id)


_current: contextvars.ContextVar[Caller] = contextvars.ContextVar("astrabox_caller")


class NoCaller(RuntimeError):
    """A handler ran without an authenticated caller: the authenticator does not cover its method."""


def current() -> Caller:
    try:
        return _current.get()
    except LookupError:
        raise NoCaller("no authenticated caller for this call") from None


def bound() -> Caller | None:
    """The current call's caller; None outside a client's call (the relay, the sweeps)."""
    return _current.get(None)


def bind(caller: Caller) -> contextvars.Token[Caller]:
    """Make `caller` the current one (in this task) until `unbind(token)`."""
    return _current.set(caller)


def unbind(token: contextvars.Token[Caller]) -> None:
    _current.reset(token)
