"""The control plane's domain errors.

    KernelError
    ├── InvalidArgument        INVALID_ARGUMENT     reason INVALID_ARGUMENT, FIELD_TOO_LONG, MALFORMED_REQUEST,
    │                                                   PAGE_TOKEN_INVALID, PERMISSION_MODE_INVALID,
    │                                                   PATH_OUTSIDE_WORKSPACE, INVALID_AGENT_SPEC,
    │                                                   INVALID_ENVIRONMENT_SPEC,
    │                                                   LABEL_SELECTOR_INVALID, PAGE_TOKEN_FILTERS_CHANGED,
    │                                                   INVALID_GIT_SOURCE, INVALID_SCHEDULE
    ├── SessionNotFound        NOT_FOUND            reason SESSION_NOT_FOUND
    ├── InteractionNotFound    NOT_FOUND            reason INTERACTION_NOT_FOUND
    ├── TaskNotFound           NOT_FOUND            reason TASK_NOT_FOUND
    ├── ToolGrantNotFound      NOT_FOUND            reason TOOL_GRANT_NOT_FOUND
    ├── InteractionNotPending  FAILED_PRECONDITION  reason INTERACTION_NOT_PENDING
    ├── SessionNotReady        FAILED_PRECONDITION  reason SESSION_NOT_READY
    ├── RequestIdReused        ALREADY_EXISTS       reason REQUEST_ID_REUSED
    ├── RuntimeNotAvailable    FAILED_PRECONDITION  reason RUNTIME_NOT_AVAILABLE
    ├── ForkRefused            FAILED_PRECONDITION  reason FORK_POINT_NOT_AT_TURN_END, FORK_POINT_NOT_AVAILABLE,
    │                                                   FORK_SOURCE_BUSY
    ├── ForkPointBeyondEnd     OUT_OF_RANGE         reason FORK_POINT_BEYOND_END; metadata last_seq
    ├── QuotaExceeded          RESOURCE_EXHAUSTED   reason QUOTA_EXCEEDED; metadata quota, limit, used; a
    │                                                   RetryInfo where waiting makes room
    ├── CapacityExhausted      RESOURCE_EXHAUSTED   reason CAPACITY_EXHAUSTED; metadata agents, capacity, live
    ├── DedicatedHostsUnavailable FAILED_PRECONDITION reason DEDICATED_HOSTS_UNAVAILABLE; metadata agents,
    │                                                   capacity, live
    ├── CredentialsHostNotDedicated PERMISSION_DENIED reason CREDENTIALS_HOST_NOT_DEDICATED (ResolveCredentials)
    ├── NoAgentAvailable       UNAVAILABLE          reason NO_AGENT_AVAILABLE
    ├── IsolationUnavailable   FAILED_PRECONDITION  reason ISOLATION_UNAVAILABLE; metadata isolation
    ├── AgentNotConnected      UNAVAILABLE          reason AGENT_NOT_CONNECTED
    ├── Unauthenticated        UNAUTHENTICATED      reason CREDENTIALS_MISSING, CREDENTIALS_INVALID,
    │                                                   CREDENTIALS_EXPIRED, CREDENTIALS_REVOKED
    ├── CredentialsUnverifiable UNAVAILABLE         reason CREDENTIALS_UNVERIFIABLE
    ├── DatabaseUnavailable    UNAVAILABLE          reason DATABASE_UNAVAILABLE (retry: nothing or all was done)
    ├── DatabaseConflict       ABORTED              reason DATABASE_CONFLICT (nothing was done; re-read, retry)
    ├── RoleInsufficient       PERMISSION_DENIED    reason ROLE_INSUFFICIENT
    ├── AgentIdBound           PERMISSION_DENIED    reason AGENT_ID_BOUND
    ├── AgentPendingAdmission  PERMISSION_DENIED    reason AGENT_PENDING_ADMISSION; metadata agent_id, fingerprint
    ├── AgentVersionUnsupported FAILED_PRECONDITION reason AGENT_VERSION_UNSUPPORTED; metadata agent_version
    ├── ProjectNotFound        NOT_FOUND            reason PROJECT_NOT_FOUND
    ├── ProjectExists          ALREADY_EXISTS       reason PROJECT_EXISTS
    ├── KeyNotFound            NOT_FOUND            reason KEY_NOT_FOUND
    ├── AgentNotFound          NOT_FOUND            reason AGENT_NOT_FOUND
    ├── AgentDefinitionNotFound   NOT_FOUND         reason AGENT_NOT_FOUND (AgentService: an agent definition)
    ├── AgentVersionNotFound   NOT_FOUND            reason AGENT_VERSION_NOT_FOUND
    ├── AgentDefinitionExists  ALREADY_EXISTS       reason AGENT_ALREADY_EXISTS
    ├── AgentDefinitionArchived FAILED_PRECONDITION reason AGENT_ARCHIVED
    ├── AgentVersionConflict   ABORTED              reason AGENT_VERSION_CONFLICT; metadata expected_version,
    │                                                   latest_version
    ├── EnvironmentNotFound    NOT_FOUND            reason ENVIRONMENT_NOT_FOUND
    ├── EnvironmentVersionNotFound NOT_FOUND        reason ENVIRONMENT_VERSION_NOT_FOUND
    ├── EnvironmentExists      ALREADY_EXISTS       reason ENVIRONMENT_ALREADY_EXISTS
    ├── EnvironmentArchived    FAILED_PRECONDITION  reason ENVIRONMENT_ARCHIVED
    ├── EnvironmentVersionConflict ABORTED          reason ENVIRONMENT_VERSION_CONFLICT; metadata
    │                                                   expected_version, latest_version
    ├── ScheduleNotFound       NOT_FOUND            reason SCHEDULE_NOT_FOUND
    ├── ScheduleExists         ALREADY_EXISTS       reason SCHEDULE_ALREADY_EXISTS
    ├── ScheduleLimitReached   RESOURCE_EXHAUSTED   reason SCHEDULE_LIMIT_REACHED; metadata limit
    ├── MemoryStoreNotFound    NOT_FOUND            reason MEMORY_STORE_NOT_FOUND
    ├── MemoryStoreExists      ALREADY_EXISTS       reason MEMORY_STORE_ALREADY_EXISTS
    ├── MemoryStoreLimitReached RESOURCE_EXHAUSTED  reason MEMORY_STORE_LIMIT_REACHED; metadata limit
    ├── MemoryDocumentNotFound NOT_FOUND            reason MEMORY_DOCUMENT_NOT_FOUND
    ├── MemoryDocumentTooLarge INVALID_ARGUMENT     reason MEMORY_DOCUMENT_TOO_LARGE; metadata limit
    ├── MemoryDocumentLimitReached RESOURCE_EXHAUSTED reason MEMORY_DOCUMENT_LIMIT_REACHED; metadata limit
    ├── MemoryStoreFull        RESOURCE_EXHAUSTED   reason MEMORY_STORE_FULL; metadata limit, size
    ├── MemoryVersionConflict  ABORTED              reason MEMORY_VERSION_CONFLICT; metadata
    │                                                   expected_version, latest_version
    ├── SessionBudgetExhausted FAILED_PRECONDITION  reason SESSION_BUDGET_EXHAUSTED; metadata cost_usd, limit_usd
    ├── CredentialNotFound     NOT_FOUND            reason CREDENTIAL_NOT_FOUND
    ├── CredentialsUnavailable FAILED_PRECONDITION  reason CREDENTIALS_UNAVAILABLE (no credentials key)
    ├── CredentialUnreadable   FAILED_PRECONDITION  reason CREDENTIAL_KEY_MISMATCH, CREDENTIAL_CORRUPT
    ├── SessionNotOnAgent      PERMISSION_DENIED    reason SESSION_NOT_ON_AGENT (ResolveCredentials)
    ├── WebhookNotFound        NOT_FOUND            reason WEBHOOK_NOT_FOUND
    ├── WebhookDeliveryNotFound NOT_FOUND           reason WEBHOOK_DELIVERY_NOT_FOUND
    ├── Unimplemented          UNIMPLEMENTED        reason NOT_IMPLEMENTED (a field not served yet)
    ├── WorkspaceFailed        the agent's own code and reason (PATH_OUTSIDE_WORKSPACE, PATH_NOT_FOUND, …)
    └── Internal               INTERNAL             reason INTERNAL; the message holds only a reference
                                                    to the log entry with the details

The mapping to gRPC status codes lives in one place, `controlplane.status`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import grpc


class KernelError(Exception):
    """A request the kernel refused; the message is meant for the caller."""

    reason = "INTERNAL"
    # How long the caller should wait before it retries, when waiting helps (a RetryInfo detail).
    retry_after: timedelta | None = None

    def __init__(self, message: str, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = dict(metadata or {})


class InvalidArgument(KernelError):
    reason = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str, reason: str = "INVALID_ARGUMENT") -> None:
        super().__init__(message, {"field": field})
        self.reason = reason


class SessionNotFound(KernelError):
    reason = "SESSION_NOT_FOUND"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id} does not exist", {"session_id": session_id})


class InteractionNotFound(KernelError):
    reason = "INTERACTION_NOT_FOUND"


class TaskNotFound(KernelError):
    reason = "TASK_NOT_FOUND"


class ToolGrantNotFound(KernelError):
    reason = "TOOL_GRANT_NOT_FOUND"


class InteractionNotPending(KernelError):
    reason = "INTERACTION_NOT_PENDING"


class SessionNotReady(KernelError):
    reason = "SESSION_NOT_READY"


class RequestIdReused(KernelError):
    reason = "REQUEST_ID_REUSED"


class NoAgentAvailable(KernelError):
    """No live agent runs the engine (for the session's project): there is nowhere to place it."""

    reason = "NO_AGENT_AVAILABLE"


class IsolationUnavailable(NoAgentAvailable):
    """The session's environment asks for an isolation (gVisor) that no live agent able to run the
    session offers: no outage, a requirement; an agent started with `--sandbox-runtime runsc` helps."""

    reason = "ISOLATION_UNAVAILABLE"


class AgentsCordoned(NoAgentAvailable):
    """Agents that could run the session are connected, but an operator cordoned or is draining every
    one of them (`controlplane.drains`): no outage, a decision; uncordoning one, or another agent, helps."""

    reason = "AGENTS_CORDONED"


class CapacityExhausted(KernelError):
    """Agents that could run the session are connected, but every one of them already runs as many
    live runtimes as its capacity allows (`controlplane.agents`); nothing was done. Unlike
    NoAgentAvailable, this is no outage: a slot frees when a session is archived, deleted, fails or
    is stopped while idle, or when capacity is added."""

    reason = "CAPACITY_EXHAUSTED"

    def __init__(self, message: str, agents: int, capacity: int, live: int) -> None:
        super().__init__(message, {"agents": str(agents), "capacity": str(capacity), "live": str(live)})


class DedicatedHostsUnavailable(KernelError):
    """The session binds credentials, its project lets only its dedicated agents run such sessions
    (credential_hosts "dedicated"), and none of them has a free slot: it never falls back to the
    shared pool."""

    reason = "DEDICATED_HOSTS_UNAVAILABLE"

    def __init__(self, message: str, agents: int, capacity: int, live: int) -> None:
        super().__init__(message, {"agents": str(agents), "capacity": str(capacity), "live": str(live)})


class CredentialsHostNotDedicated(KernelError):
    """An agent asked for the credentials of a session whose project gives them only to its dedicated
    agents, and it is not one of them."""

    reason = "CREDENTIALS_HOST_NOT_DEDICATED"

    def __init__(self, session_id: str, agent_id: str) -> None:
        super().__init__(
            f"agent {agent_id} is not dedicated to the project of session {session_id}, whose credentials go only"
            " to the project's dedicated hosts",
            {"session_id": session_id, "agent_id": agent_id},
        )


class RuntimeNotAvailable(KernelError):
    reason = "RUNTIME_NOT_AVAILABLE"


class ForkRefused(KernelError):
    """ForkSession cannot fork the session at that point, or now (`controlplane.forks`)."""

    reason = "FORK_POINT_NOT_AT_TURN_END"

    def __init__(self, reason: str, message: str, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message, metadata)
        self.reason = reason


class ForkPointBeyondEnd(KernelError):
    reason = "FORK_POINT_BEYOND_END"


class QuotaExceeded(KernelError):
    """One of the project's quotas (`controlplane.quotas`) does not allow the call; nothing was done."""

    reason = "QUOTA_EXCEEDED"

    def __init__(self, quota: str, limit: int, used: int, message: str, retry_after: timedelta | None = None) -> None:
        super().__init__(message, {"quota": quota, "limit": str(limit), "used": str(used)})
        self.retry_after = retry_after


class AgentNotConnected(KernelError):
    reason = "AGENT_NOT_CONNECTED"


class Unauthenticated(KernelError):
    """The call's credential is missing or not valid; the message never quotes it."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class CredentialsUnverifiable(KernelError):
    reason = "CREDENTIALS_UNVERIFIABLE"

    def __init__(self) -> None:
        super().__init__("the credential cannot be checked right now (the database is unreachable); retry")


class DatabaseUnavailable(KernelError):
    """The database could not serve the call (`controlplane.database.UNAVAILABLE_ERRORS`). A call that
    writes either committed or did nothing; the request ids make retrying it safe. The message never
    says where the database is: that is the operator's to read in the log."""

    reason = "DATABASE_UNAVAILABLE"

    def __init__(self) -> None:
        super().__init__("the database cannot be reached right now; retry shortly")


class DatabaseConflict(KernelError):
    """A concurrent call changed what this one read (`controlplane.database.CONFLICT_ERRORS`); nothing
    was done."""

    reason = "DATABASE_CONFLICT"

    def __init__(self) -> None:
        super().__init__("the call collided with a concurrent change and did nothing; read again and retry")


class RoleInsufficient(KernelError):
    reason = "ROLE_INSUFFICIENT"

    def __init__(self, method: str, required: str, role: str) -> None:
        super().__init__(
            f"{method} needs a key with the {required} role; this key is a {role} key",
            {"required": required, "method": method},
        )


class AgentIdBound(KernelError):
    reason = "AGENT_ID_BOUND"

    def __init__(self, agent_id: str) -> None:
        super().__init__(
            f"agent {agent_id} is enrolled with another credential: this Hello cannot use its id",
            {"agent_id": agent_id},
        )


class AgentPendingAdmission(KernelError):
    """An enrolled agent that no operator admitted yet (`identity.agent_admission`): it is given no
    work, no credential and no workspace request until it is."""

    reason = "AGENT_PENDING_ADMISSION"

    def __init__(self, agent_id: str, fingerprint: str) -> None:
        super().__init__(
            f"agent {agent_id} (credential fingerprint {fingerprint}) is enrolled but not admitted: an operator"
            f" admits it with `astrabox hosts admit {agent_id}`, or start it with a join token"
            " (`astrabox hosts join-token`)",
            {"agent_id": agent_id, "fingerprint": fingerprint},
        )


class AgentVersionUnsupported(KernelError):
    reason = "AGENT_VERSION_UNSUPPORTED"

    def __init__(self, why: str, agent_version: str) -> None:
        super().__init__(why, {"agent_version": agent_version[:40]})


class AgentNotFound(KernelError):
    reason = "AGENT_NOT_FOUND"

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"agent {agent_id} never enrolled", {"agent_id": agent_id})


class AgentDefinitionNotFound(KernelError):
    """No agent definition of the caller's project has this name or id (another project's looks the same)."""

    reason = "AGENT_NOT_FOUND"

    def __init__(self, ref: str) -> None:
        super().__init__(
            f"agent {ref} does not exist in this project; `astrabox agents list` shows its agents", {"agent": ref}
        )


class AgentVersionNotFound(KernelError):
    reason = "AGENT_VERSION_NOT_FOUND"

    def __init__(self, name: str, version: int, latest_version: int) -> None:
        super().__init__(
            f"agent {name} has no version {version}: its versions are 1 to {latest_version}",
            {"agent": name, "version": str(version), "latest_version": str(latest_version)},
        )


class AgentDefinitionExists(KernelError):
    reason = "AGENT_ALREADY_EXISTS"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"an agent named {name} already exists in this project (archived agents keep their names);"
            " update it (UpdateAgent) or choose another name",
            {"name": name},
        )


class AgentDefinitionArchived(KernelError):
    reason = "AGENT_ARCHIVED"

    def __init__(self, name: str, doing: str) -> None:
        super().__init__(f"agent {name} is archived: it {doing}", {"agent": name})


class AgentVersionConflict(KernelError):
    """An update named the version it meant to replace, and another update made a newer one first."""

    reason = "AGENT_VERSION_CONFLICT"

    def __init__(self, name: str, expected: int, latest: int) -> None:
        super().__init__(
            f"agent {name} is at version {latest}, not {expected}: someone else changed it; read it again"
            f" (GetAgent) and apply your change to version {latest}",
            {"agent": name, "expected_version": str(expected), "latest_version": str(latest)},
        )


class ProjectNotFound(KernelError):
    reason = "PROJECT_NOT_FOUND"

    def __init__(self, project_id: str) -> None:
        super().__init__(f"project {project_id} does not exist", {"project_id": project_id})


class ProjectExists(KernelError):
    reason = "PROJECT_EXISTS"

    def __init__(self, name: str) -> None:
        super().__init__(f"a project named {name} already exists", {"name": name})


class KeyNotFound(KernelError):
    reason = "KEY_NOT_FOUND"

    def __init__(self, key_id: str) -> None:
        super().__init__(f"API key {key_id} does not exist", {"key_id": key_id})


class SessionBudgetExhausted(KernelError):
    """The session has cost what its agent's limits allow (max_cost_usd_per_session): it takes no
    more messages; nothing was done."""

    reason = "SESSION_BUDGET_EXHAUSTED"

    def __init__(self, session_id: str, cost_usd: str, limit_usd: str) -> None:
        super().__init__(
            f"session {session_id} has cost ${cost_usd} of the ${limit_usd} its agent allows a session"
            " (limits.max_cost_usd_per_session) and takes no more messages: start a new session, or one"
            " from an agent version with a higher limit",
            {"session_id": session_id, "cost_usd": cost_usd, "limit_usd": limit_usd},
        )


class CredentialNotFound(KernelError):
    """No credential of the caller's project has this name (another project's looks the same)."""

    reason = "CREDENTIAL_NOT_FOUND"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"credential {name} does not exist in this project; `astrabox credentials list` shows its credentials",
            {"name": name},
        )


class CredentialsUnavailable(KernelError):
    """The control plane holds no credentials key: the credential store cannot be used."""

    reason = "CREDENTIALS_UNAVAILABLE"

    def __init__(self) -> None:
        super().__init__(
            "this control plane was started without a credentials key: start it with --credential-key-file"
            " PATH (a 0600 file holding 32 random bytes, base64: `openssl rand -base64 32`) or"
            " ASTRABOX_CREDENTIAL_KEY"
        )


class CredentialUnreadable(KernelError):
    """A stored credential does not decrypt: sealed under a key not given (CREDENTIAL_KEY_MISMATCH), or
    changed or moved in the database (CREDENTIAL_CORRUPT). Never quotes what it holds."""

    def __init__(self, reason: str, message: str, name: str) -> None:
        super().__init__(message, {"name": name})
        self.reason = reason


class WebhookNotFound(KernelError):
    """No webhook of the caller's project has this id (another project's looks the same)."""

    reason = "WEBHOOK_NOT_FOUND"

    def __init__(self, webhook_id: str) -> None:
        super().__init__(
            f"webhook {webhook_id} does not exist in this project; `astrabox webhooks list` shows its webhooks",
            {"webhook_id": webhook_id},
        )


class WebhookDeliveryNotFound(KernelError):
    """The webhook has no delivery with this id."""

    reason = "WEBHOOK_DELIVERY_NOT_FOUND"

    def __init__(self, webhook_id: str, delivery_id: str) -> None:
        super().__init__(
            f"webhook {webhook_id} has no delivery {delivery_id}; `astrabox webhooks deliveries {webhook_id}`"
            " lists them",
            {"webhook_id": webhook_id, "delivery_id": delivery_id},
        )


class SessionNotOnAgent(KernelError):
    """An agent asked for what only the agent a session is placed on may have."""

    reason = "SESSION_NOT_ON_AGENT"

    def __init__(self, session_id: str, agent_id: str) -> None:
        super().__init__(
            f"session {session_id} is not placed on agent {agent_id}", {"session_id": session_id, "agent_id": agent_id}
        )


class EnvironmentNotFound(KernelError):
    """No environment of the caller's project has this name or id (another project's looks the same)."""

    reason = "ENVIRONMENT_NOT_FOUND"

    def __init__(self, ref: str) -> None:
        super().__init__(
            f"environment {ref} does not exist in this project; `astrabox environments list` shows its environments",
            {"environment": ref},
        )


class EnvironmentVersionNotFound(KernelError):
    reason = "ENVIRONMENT_VERSION_NOT_FOUND"

    def __init__(self, name: str, version: int, latest_version: int) -> None:
        super().__init__(
            f"environment {name} has no version {version}: its versions are 1 to {latest_version}",
            {"environment": name, "version": str(version), "latest_version": str(latest_version)},
        )


class EnvironmentExists(KernelError):
    reason = "ENVIRONMENT_ALREADY_EXISTS"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"an environment named {name} already exists in this project (archived environments keep their"
            " names); update it (UpdateEnvironment) or choose another name",
            {"name": name},
        )


class EnvironmentArchived(KernelError):
    reason = "ENVIRONMENT_ARCHIVED"

    def __init__(self, name: str, doing: str) -> None:
        super().__init__(f"environment {name} is archived: it {doing}", {"environment": name})


class EnvironmentVersionConflict(KernelError):
    """An update named the version it meant to replace, and another update made a newer one first."""

    reason = "ENVIRONMENT_VERSION_CONFLICT"

    def __init__(self, name: str, expected: int, latest: int) -> None:
        super().__init__(
            f"environment {name} is at version {latest}, not {expected}: someone else changed it; read it again"
            f" (GetEnvironment) and apply your change to version {latest}",
            {"environment": name, "expected_version": str(expected), "latest_version": str(latest)},
        )


class ScheduleNotFound(KernelError):
    """No schedule of the caller's project has this name or id (another project's looks the same)."""

    reason = "SCHEDULE_NOT_FOUND"

    def __init__(self, ref: str) -> None:
        super().__init__(
            f"schedule {ref} does not exist in this project; `astrabox schedules list` shows its schedules",
            {"schedule": ref},
        )


class ScheduleExists(KernelError):
    reason = "SCHEDULE_ALREADY_EXISTS"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"a schedule named {name} already exists in this project; update it or choose another name",
            {"name": name},
        )


class ScheduleLimitReached(KernelError):
    reason = "SCHEDULE_LIMIT_REACHED"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the project has {limit} schedules, as many as a project may have: delete one first",
            {"limit": str(limit)},
        )


class MemoryStoreNotFound(KernelError):
    """No memory store of the caller's project has this name or id (another project's looks the same)."""

    reason = "MEMORY_STORE_NOT_FOUND"

    def __init__(self, ref: str) -> None:
        super().__init__(
            f"memory store {ref} does not exist in this project; `astrabox memory list` shows its stores",
            {"store": ref},
        )


class MemoryStoreExists(KernelError):
    reason = "MEMORY_STORE_ALREADY_EXISTS"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"a memory store named {name} already exists in this project; choose another name", {"name": name}
        )


class MemoryStoreLimitReached(KernelError):
    reason = "MEMORY_STORE_LIMIT_REACHED"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the project has {limit} memory stores, as many as a project may have: delete one first",
            {"limit": str(limit)},
        )


class MemoryDocumentNotFound(KernelError):
    reason = "MEMORY_DOCUMENT_NOT_FOUND"

    def __init__(self, store: str, path: str, what: str = "") -> None:
        super().__init__(
            f"memory store {store} has no document {path}{what}; `astrabox memory docs {store}` lists them",
            {"store": store, "path": path},
        )


class MemoryDocumentTooLarge(KernelError):
    reason = "MEMORY_DOCUMENT_TOO_LARGE"

    def __init__(self, size: int, limit: int, problem: str = "") -> None:
        super().__init__(
            f"a memory document is UTF-8 text without NUL of at most {limit} bytes; this one "
            + (problem or f"is {size} bytes"),
            {"limit": str(limit), "size": str(size)},
        )


class MemoryDocumentLimitReached(KernelError):
    reason = "MEMORY_DOCUMENT_LIMIT_REACHED"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the memory store holds {limit} documents, as many as a store may: delete one first",
            {"limit": str(limit)},
        )


class MemoryStoreFull(KernelError):
    reason = "MEMORY_STORE_FULL"

    def __init__(self, limit: int, size: int) -> None:
        super().__init__(
            f"the memory store's documents would hold {size} bytes; a store holds at most {limit}: delete or"
            " shorten some first",
            {"limit": str(limit), "size": str(size)},
        )


class MemoryVersionConflict(KernelError):
    reason = "MEMORY_VERSION_CONFLICT"

    def __init__(self, path: str, expected: int, latest: int) -> None:
        super().__init__(
            f"document {path} is at version {latest}, not {expected}: read it again and write over the latest",
            {"expected_version": str(expected), "latest_version": str(latest)},
        )


class Unimplemented(KernelError):
    """A request this control plane cannot serve yet; nothing was done."""

    def __init__(self, reason: str, message: str, field: str) -> None:
        super().__init__(message, {"field": field})
        self.reason = reason


class Internal(KernelError):
    """Something failed that the caller cannot act on; what is logged under `ref` says what."""

    reason = "INTERNAL"

    def __init__(self, ref: str) -> None:
        super().__init__(f"internal error (ref {ref})", {"ref": ref})


class WorkspaceFailed(KernelError):
    """The agent refused or failed a workspace request; the code and reason are its own."""

    def __init__(self, code: grpc.StatusCode, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
