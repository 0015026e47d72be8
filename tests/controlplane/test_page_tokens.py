"""Page tokens are opaque and tamper-proof: only a token this service issued, unchanged and for
the same listing, is accepted; anything else is INVALID_ARGUMENT / PAGE_TOKEN_INVALID."""

from __future__ import annotations

import base64

import pytest

from controlplane.errors import InvalidArgument
from controlplane.kernel import CreateSession
from controlplane.page_tokens import PageTokens

TOKENS = PageTokens.from_cluster_secret("a-cluster-secret")


def flip(token: str, at: int) -> str:
    replacement = "B" if token[at] != "B" else "C"
    return token[:at] + replacement + token[at + 1 :]


def tampered(token: str) -> list[str]:
    payload, tag = token.split(".")
    forged_payload = base64.urlsafe_b64encode(b'{"after":0}').rstrip(b"=").decode()
    return [
        flip(token, 0),  # a byte of the cursor
        flip(token, len(payload) + 1),  # a byte of the tag
        token[:-1],  # truncated
        token[: len(token) // 2],
        payload,  # no tag
        f"{forged_payload}.{tag}",  # another cursor under this tag
        base64.urlsafe_b64encode(b"\x00garbage\xff" * 5).decode(),  # valid base64 of garbage
        base64.urlsafe_b64encode(b'{"after": 1}').decode(),  # the old unsigned format
        token + "=",  # another spelling of the same bytes
        token + ".x",
        "",
        "é.é",
    ]


def test_a_token_reads_back_its_cursor() -> None:
    token = TOKENS.issue("events/s1", {"after": 41})
    assert TOKENS.read("events/s1", token) == {"after": 41}
    # Every replica derives the same key from the shared secret.
    assert PageTokens.from_cluster_secret("a-cluster-secret").read("events/s1", token) == {"after": 41}


@pytest.mark.parametrize("bad", tampered(TOKENS.issue("events/s1", {"after": 41})))
def test_a_tampered_token_is_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        TOKENS.read("events/s1", bad)
    assert (refused.value.reason, refused.value.metadata) == ("PAGE_TOKEN_INVALID", {"field": "page_token"})


def test_a_token_is_good_only_for_its_listing_and_its_cluster() -> None:
    token = TOKENS.issue("events/s1", {"after": 41})
    for scope, tokens in [
        ("events/s2", TOKENS),
        ("sessions", TOKENS),
        ("events/s1", PageTokens.from_cluster_secret("another-cluster")),
    ]:
        with pytest.raises(InvalidArgument) as refused:
            tokens.read(scope, token)
        assert refused.value.reason == "PAGE_TOKEN_INVALID"


async def test_the_kernel_refuses_tampered_tokens(plane) -> None:
    await plane.connect_agent()
    first = await plane.kernel.create_session(CreateSession(request_id="one", project_id=plane.project_id))
    await plane.kernel.create_session(CreateSession(request_id="two", project_id=plane.project_id))
    await plane.runtime_started(first.session_id)

    _, sessions_token = await plane.kernel.list_sessions(plane.project_id, 1, "")
    events, events_token = await plane.kernel.list_events(first.session_id, 0, 1, "")
    assert sessions_token and events_token and [e.seq for e in events.events()] == [1]
    assert (await plane.kernel.list_events(first.session_id, 0, 1, events_token))[0].events()[0].seq == 2

    # ("" is no token: the first page.)
    for bad in [*filter(None, tampered(sessions_token)), events_token]:
        with pytest.raises(InvalidArgument) as refused:
            await plane.kernel.list_sessions(plane.project_id, 1, bad)
        assert refused.value.reason == "PAGE_TOKEN_INVALID", bad
    for bad in [*filter(None, tampered(events_token)), sessions_token]:
        with pytest.raises(InvalidArgument) as refused:
            await plane.kernel.list_events(first.session_id, 0, 1, bad)
        assert refused.value.reason == "PAGE_TOKEN_INVALID", bad
