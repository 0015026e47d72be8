"""Every call to a client-facing service is authenticated before its handler runs.

`Authenticator` is the one gRPC server interceptor that does it: it reads the
call's `authorization: Bearer <key>` metadata, verifies the key
(`Credentials`), checks the role the method needs (`identity.rules`), and runs
the handler with the caller bound (`identity.callers.current`). A refused call
never reaches its handler, nor has its request decoded. A call that mutates
(its rule says) is recorded in the audit trail when it ends (`identity.audit`).

An API key is checked against its stored digest (`identity.keys`); a JWT,
when single sign-on is configured, by `identity.tokens`.

Verification is cached per credential for `ttl` seconds (default 2): a call
with a key seen in the last two seconds costs a dictionary lookup, and a
revoked or expired key stops working on every replica within `ttl`. Refusals
are cached too, so a flood of one bad key does not become a flood of queries.
The cache is keyed by the credential's SHA-256 and bounded (least recently
used first out).
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import grpc
import structlog

from controlplane import database
from controlplane.errors import CredentialsUnverifiable, RoleInsufficient, Unauthenticated
from controlplane.identity import audit, keys, store
from controlplane.identity.callers import Caller, Role, bind, unbind
from controlplane.identity.rules import GUARDED_SERVICES, RULES, Rule
from controlplane.identity.tokens import TokenVerifier, looks_like_jwt
from controlplane.status import refusal, to_status, unexpected
from controlplane.workspace import drain

log = structlog.get_logger(__name__)

AUTHORIZATION = "authorization"
DEFAULT_TTL_S = 2.0
# Longer is no credential this service takes (gRPC itself refuses metadata beyond 8-16 KiB).
MAX_CREDENTIAL_CHARS = 4096

_MISSING = Unauthenticated(
    "CREDENTIALS_MISSING", "this call needs an API key: send the metadata `authorization: Bearer <key>`"
)
_INVALID = Unauthenticated("CREDENTIALS_INVALID", "the credential is not a valid API key of this installation")


class Credentials:
    """Turns a credential into its Caller, or raises Unauthenticated / CredentialsUnverifiable."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        ttl: float = DEFAULT_TTL_S,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        tokens: TokenVerifier | None = None,
    ) -> None:
        self._pool = pool
        self._tokens = tokens
        self._ttl = ttl
        self._max_entries = max_entries
        self._clock = clock
        # credential digest -> (checked at, the caller and its key's expiry, or the refusal)
        self._cache: OrderedDict[bytes, tuple[float, tuple[Caller, datetime | None] | Unauthenticated]] = OrderedDict()

    async def verify(self, credential: str) -> Caller:
        cache_key = hashlib.sha256(credential.encode(errors="surrogatepass")).digest()
        now = self._clock()
        cached = self._cache.get(cache_key)
        if cached is None or now - cached[0] >= self._ttl:
            cached = (now, await self._lookup(credential))
            self._cache[cache_key] = cached
            while len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)
        self._cache.move_to_end(cache_key)
        verdict = cached[1]
        if isinstance(verdict, Unauthenticated):
            raise verdict
        caller, expires_at = verdict
        if expires_at is not None and expires_at <= datetime.now(UTC):
            raise _expired(caller.who, expires_at)
        return caller

    async def _lookup(self, credential: str) -> tuple[Caller, datetime | None] | Unauthenticated:
        if self._tokens is not None and looks_like_jwt(credential):
            return await self._lookup_token(self._tokens, credential)
        parsed = keys.parse(credential)
        if parsed is None:
            return _INVALID
        key_id, secret = parsed
        try:
            stored = await store.find_key(self._pool, key_id)
            if stored is None or not keys.matches(secret, stored.secret_sha256):
                return _INVALID
            key = stored.key
            if key.revoked_at is not None:
                return Unauthenticated("CREDENTIALS_REVOKED", f"API key {key_id} was revoked")
            if key.last_used_at is None or (datetime.now(UTC) - key.last_used_at).total_seconds() >= 60:
                await store.touch_key(self._pool, key_id)
        except database.FAULTS as error:
            log.warning("credentials_unverifiable", error=type(error).__name__)
            raise CredentialsUnverifiable() from None
        caller = Caller(key.project_id, stored.project.name, key.role, key_id, stored.project.operator)
        return caller, key.expires_at

    async def _lookup_token(
        self, tokens: TokenVerifier, token: str
    ) -> tuple[Caller, datetime | None] | Unauthenticated:
        try:
            claims = await tokens.verify(token)
            project = await store.find_project_by_name(self._pool, claims.project)
        except Unauthenticated as refused:
            return refused
        except database.FAULTS as error:
            log.warning("credentials_unverifiable", error=type(error).__name__)
            raise CredentialsUnverifiable() from None
        if project is None:
            return Unauthenticated("CREDENTIALS_INVALID", "the token is not valid: its project does not exist")
        caller = Caller(
            project.project_id, project.name, Role.from_label(claims.role), "", project.operator, claims.subject
        )
        return caller, claims.expires_at


def _expired(who: str, at: datetime) -> Unauthenticated:
    what = f"API key {who.removeprefix('key:')}" if who.startswith("key:") else "the token"
    return Unauthenticated("CREDENTIALS_EXPIRED", f"{what} expired at {at.isoformat(timespec='seconds')}")


def bearer(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    """The credential of `authorization: Bearer <credential>`; Unauthenticated when there is none."""
    values = [value for name, value in metadata or () if name == AUTHORIZATION]
    if not values:
        raise _MISSING
    if len(values) > 1 or not isinstance(values[0], str) or len(values[0]) > MAX_CREDENTIAL_CHARS:
        raise _INVALID
    scheme, _, credential = values[0].strip().partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise _INVALID
    return credential.strip()


# grpc ships no type information, so the base class is Any (see controlplane.edge).
class Authenticator(grpc.aio.ServerInterceptor):  # type: ignore[misc, unused-ignore]
    """Authenticates and authorizes every call to `GUARDED_SERVICES`; others pass untouched."""

    def __init__(self, credentials: Credentials, audit_pool: asyncpg.Pool, rules: dict[str, Rule] = RULES) -> None:
        self._credentials = credentials
        self._audit_pool = audit_pool
        self._rules = rules
        self._prefixes = tuple(f"/{name}/" for name in GUARDED_SERVICES)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not method.startswith(self._prefixes):
            return handler
        try:
            caller = await self.authorize(method, handler_call_details.invocation_metadata)
        except Exception as error:  # raised here, gRPC would answer UNKNOWN with its text
            return _refusal(handler, to_status(refusal(error, method=method)))
        name = method.rsplit("/", 1)[-1]
        pool = self._audit_pool

        async def audited(request: Any, code: str) -> None:
            await audit.record(pool, caller, name, request, code)

        return _bound(handler, caller, audited if self._rules[method].mutates else None)

    async def authorize(self, method: str, metadata: Sequence[tuple[str, str | bytes]] | None) -> Caller:
        rule = self._rules.get(method)
        caller = await self._credentials.verify(bearer(metadata))
        name = method.rsplit("/", 1)[-1]
        if rule is None:  # fail closed: an RPC nobody gave a rule
            log.error("rpc_without_authorization_rule", method=method)
            raise RoleInsufficient(name, "(none: this method has no authorization rule)", caller.role.label)
        if not rule.allows(caller):
            log.info("rpc_refused", method=name, caller=caller.who, role=caller.role.label, needs=rule.needs)
            raise RoleInsufficient(name, rule.needs, caller.role.label)
        return caller


def _kind(handler: grpc.RpcMethodHandler) -> str:
    for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        if getattr(handler, kind):
            return kind
    raise ValueError("a method handler with no behavior")


def _ignore(data: bytes) -> None:
    return None


def _refusal(handler: grpc.RpcMethodHandler, status: grpc.Status) -> grpc.RpcMethodHandler:
    """`handler`'s shape, answering `status` without decoding the request or running the handler.
    What a client still streams is read and dropped first (bounded, see `drain`): else its next
    write fails with INTERNAL and hides the refusal."""
    streaming_request = bool(handler.stream_unary or handler.stream_stream)

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        if streaming_request:
            await drain(request)
        await context.abort_with_status(status)

    return handler._replace(request_deserializer=_ignore, **{_kind(handler): refuse})


class _FirstRequest:
    """A request stream that remembers its first message (what an audit record names)."""

    def __init__(self, requests: AsyncIterator[Any]) -> None:
        self._requests = requests
        self.first: Any = None

    def __aiter__(self) -> _FirstRequest:
        return self

    async def __anext__(self) -> Any:
        message = await anext(self._requests)
        if self.first is None:
            self.first = message
        return message


def _outcome(context: grpc.aio.ServicerContext, error: BaseException | None) -> str:
    if error is None:
        return "OK"
    if isinstance(error, grpc.aio.AbortError):
        code = context.code()
        return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
    return "CANCELLED" if context.cancelled() else "INTERNAL"


Audit = Callable[[Any, str], Awaitable[None]]


class _Settlement:
    """One call's audit record (none without `audited`), written once: before a refusal is sent (an
    abort sends its status at once, so a caller holding its answer finds the record), else when the
    handler has ended."""

    def __init__(self, audited: Audit | None, request: Any, streaming_request: bool) -> None:
        self._audited = audited
        self._request = request
        self._streaming_request = streaming_request
        self._done = audited is None

    async def ended(self, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
        if not self._done:
            await self(_outcome(context, error))

    async def __call__(self, code: str) -> None:
        if self._done or self._audited is None:
            return
        self._done = True
        try:
            await self._audited(self._request.first if self._streaming_request else self._request, code)
        except Exception as failure:  # the call has its answer already: a lost record must not replace it
            unexpected(failure, step="audit")


class _RecordingContext:
    """A call's context whose aborts settle the call's audit record first; all else is the context's."""

    def __init__(self, context: grpc.aio.ServicerContext, settle: _Settlement) -> None:
        self._context = context
        self._settle = settle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        await self._settle(code.name)
        await self._context.abort(code, details, trailing_metadata)

    async def abort_with_status(self, status: grpc.Status) -> None:
        await self._settle(status.code.name)
        await self._context.abort_with_status(status)


def _bound(handler: grpc.RpcMethodHandler, caller: Caller, audited: Audit | None = None) -> grpc.RpcMethodHandler:
    """`handler` running with `caller` bound for as long as it runs, and `audited` (when given) with
    the request and the outcome once it has ended (a refusal: before it is sent)."""
    kind = _kind(handler)
    behavior = getattr(handler, kind)
    streaming_request = kind in ("stream_unary", "stream_stream")
    wrapped: Callable[..., Any]

    def prepared(request: Any, context: grpc.aio.ServicerContext) -> tuple[Any, Any, _Settlement]:
        request = _FirstRequest(request) if streaming_request else request
        settle = _Settlement(audited, request, streaming_request)
        return request, context if audited is None else _RecordingContext(context, settle), settle

    if inspect.isasyncgenfunction(behavior):

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            # Not reset afterwards: a generator may be closed from another context, where the
            # reset would fail, and every call runs in a task (a context) of its own anyway.
            bind(caller)
            request, given, settle = prepared(request, context)
            try:
                async for response in behavior(request, given):
                    yield response
            except BaseException as error:
                await settle.ended(context, error)
                raise
            await settle.ended(context, None)

        wrapped = stream
    else:

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            token = bind(caller)
            request, given, settle = prepared(request, context)
            try:
                response = await behavior(request, given)
            except BaseException as error:
                await settle.ended(context, error)
                raise
            finally:
                unbind(token)
            await settle.ended(context, None)
            return response

        wrapped = call
    return handler._replace(**{kind: wrapped})
