"""The control plane's SQL, one module per table: each holds every statement that touches its table.

Functions take the connection to run on, so a caller keeps its transaction and the order of its
statements (row locks are taken in that order). One annotated `asyncpg.Connection` must be inside the
caller's transaction; one annotated `asyncpg.Connection | asyncpg.Pool` may also run on its own.
The map of tables to modules, and the exceptions, are in `controlplane`'s docstring.
"""

from controlplane.store import (
    agent_commands,
    agent_credentials,
    agent_definition_versions,
    agent_definitions,
    agent_join_tokens,
    agents,
    background_tasks,
    cluster_secret,
    command_leases,
    credential_store,
    engine_transcripts,
    environment_versions,
    environments,
    events,
    interactions,
    project_quotas,
    schedule_runs,
    schedules,
    session_requests,
    sessions,
    subagent_calls,
    tool_calls,
    tool_grants,
    turns,
    webhook_attempts,
    webhook_deliveries,
    webhooks,
)

__all__ = [
    "agent_commands",
    "agent_credentials",
    "agent_definition_versions",
    "agent_definitions",
    "agent_join_tokens",
    "agents",
    "background_tasks",
    "cluster_secret",
    "command_leases",
    "credential_store",
    "engine_transcripts",
    "environment_versions",
    "environments",
    "events",
    "interactions",
    "project_quotas",
    "schedule_runs",
    "schedules",
    "session_requests",
    "sessions",
    "subagent_calls",
    "tool_calls",
    "tool_grants",
    "turns",
    "webhook_attempts",
    "webhook_deliveries",
    "webhooks",
]
