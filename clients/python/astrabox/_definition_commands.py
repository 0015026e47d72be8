"""What `astrabox agents` and `astrabox environments` print alike: a line per applied definition,
times, and a version as JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message


def applied(name: str, version: int, new: bool, created: bool) -> str:
    """ "created NAME v1", "NAME v3 (new version)" or "NAME v3 (unchanged)"."""
    number = f"{name} v{version}"
    if new:
        return f"created {number}"
    return f"{number} ({'new version' if created else 'unchanged'})"


def when(time: datetime) -> str:
    return time.isoformat(timespec="seconds")


def as_json(identity: dict[str, Any], create_time: datetime, spec: Message) -> str:
    """A version as `show -o json` prints it: its identity, when it was made, and its spec."""
    document = {
        **identity,
        "create_time": when(create_time),
        "spec": json_format.MessageToDict(spec, preserving_proto_field_name=True),
    }
    return json.dumps(document, indent=2) + "\n"
