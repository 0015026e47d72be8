"""What the clients of a project's named, versioned definitions (agents, environments) share: a
listing read page after page, and `apply` (create, or update with the whole definition)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

from astrabox.errors import AstraBoxError

T = TypeVar("T")
Applied = TypeVar("Applied")


async def pages(read: Callable[[str], Awaitable[Any]], items: Callable[[Any], Iterable[T]]) -> AsyncIterator[T]:
    """Every item of a paged listing: `read(token)` answers a page, `items(page)` its items."""
    token = ""
    while True:
        page = await read(token)
        for item in items(page):
            yield item
        if not (token := page.next_page_token):
            return


async def apply(
    kind: str,
    update: Callable[[], Awaitable[Applied]],
    create: Callable[[], Awaitable[Applied]],
) -> Applied:
    """Update the definition, or create it if the project has none of that name (`kind`: AGENT,
    ENVIRONMENT: the reasons are <KIND>_NOT_FOUND and <KIND>_ALREADY_EXISTS). Safe against a
    concurrent apply: one created in between is updated instead."""
    try:
        return await update()
    except AstraBoxError as error:
        if error.reason != f"{kind}_NOT_FOUND":
            raise
    try:
        return await create()
    except AstraBoxError as error:
        if error.reason != f"{kind}_ALREADY_EXISTS":
            raise
        return await update()
