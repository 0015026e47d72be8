"""The control plane: sessions, their journal and the agents that run them, on PostgreSQL.

One process per replica (`python -m controlplane`, `astrabox controlplane`); replicas share one
database and nothing else. Its map:

    server.py        composition root: pool, migrations, the services below, the sweep
    main.py          the process: flags, logging, run until signalled
    health.py        the gRPC health kept true: NOT_SERVING while PostgreSQL cannot be reached
    metrics.py       the Prometheus metrics (`--metrics-listen`): every metric object, the RPC interceptor
    settings.py      every setting: flag, environment variable, default
    database.py      the connection pool and the checksummed migrations (owns `schema_migrations`)
    embedded_postgres.py  a PostgreSQL of its own for `astrabox up` and the tests
    migrations/      the schema, one numbered SQL file per change
  the client's side
    api.py           SessionKernelService: protobuf in, domain calls, protobuf out
    edge.py          around every call: tolerant decoding, bounded requests, errors as statuses
    validation.py    what a request's fields may hold
    convert.py       domain records to protobuf
    status.py, errors.py  the domain errors and their one mapping to gRPC statuses
    page_tokens.py   signed cursors of paged listings
    named_definitions.py  what named, versioned definitions (agents, environments) share: names,
                     references, versions, canonical form and digest, listing cursors
    listing.py       ListSessions' filters: states, label selector, creation time
    git_sources.py   what a session's git repository (CreateSession's git_source) may be
  sessions
    kernel.py        create, get, list, archive, delete sessions; list and watch their events
    conversation.py  messages, interrupts, answers to interactions, permission modes, task stops
    turns.py         the queue of messages, their dispatch to the engine, their end, placing again
    usage.py         a turn's tokens and cost from the engine's result; the session's totals
    requests.py      idempotency of session commands (request ids)
    quotas.py        each project's limits, counted in PostgreSQL so they hold across replicas
    session.py       the session's records and states
    journal.py       the journal transaction: events appended, watchers woken (and handed them) after the commit
    live.py          the live tail: this replica's watchers, the events its commits hand them, and
                     LISTEN/NOTIFY from the others
    deltas.py        live deltas (text as it is written) from agent streams to this replica's watchers:
                     per-watcher bounded queues that merge, ordered after the events before them
    deadlines.py     the sweep: lapsed leases, overdue interrupts and startups, idle runtimes
    retention.py     ... and released sessions forgotten with all of theirs after --session-retention
    subagents.py     sub-agent calls: each a child session created, prompted and awaited by a leased
                     loop, its final text the parent's tool result
  agents
    relay.py         RunnerService.Connect, one stream per agent: outputs, acks, commands, heartbeats
    outputs.py       an agent's outputs journaled exactly once: plain runs in one statement, the rest
    output_applier.py  ... the rest: each output's events and projection changes, in the batch's transaction
    verdicts.py      an agent's verdicts on its commands, and what each settles
    destructions.py  a released session's sandbox: what a destroy verdict does, the retries' backoff
    agents.py        leases granted, engine manifests, placement, the commands queued for agents
    leases.py        leases renewed from heartbeats, held by live streams, on a connection of their own
    drains.py        cordons and drains: agents out of placement, their idle sessions moved (by the sweep)
    engines.py       engines' capability manifests, as agents declare them
    tool_grants.py   tools a session may use without asking: granted by answers, revoked, sent to agents
    forks.py         ForkSession: a new session from another's conversation at a turn end and its files
    workspace.py     workspace requests carried to the session's agent
    forwarding.py    ... through the replica holding the agent's stream (ForwardWorkspace)
  store/           the SQL, one owner module per table, holding every statement on it
    sessions.py            sessions; also reads interactions, background_tasks, turns, tool_grants,
                           subagent_calls and agents (a session's view) and agents, events, agent_commands (the sweep)
    events.py              events; its append also moves sessions.last_seq on (one atomic step), and an
                           agent's plain outputs' cursor, checking in turns that their turn goes on
    turns.py               turns            interactions.py        interactions
    background_tasks.py    background_tasks session_requests.py    session_requests
    engine_transcripts.py  engine_transcripts
    session_forks.py       sessions' fork columns (where a fork came from, its files copied)
    agents.py              agents; placement also counts sessions
    agent_commands.py      agent_commands   cluster_secret.py      cluster_secret
    agent_credentials.py   agent_credentials (each agent's credential, bound at enrollment, its admission)
    agent_join_tokens.py   agent_join_tokens (operators' single-use tokens admitting a new agent)
    project_quotas.py      project_quotas   command_leases.py      command_leases
    tool_calls.py          open_tool_calls (the engine's tool calls still without a result)
    tool_grants.py         tool_grants (tools a session may use without asking)
    agent_definitions.py   agent_definitions (a project's named agents)
    agent_definition_versions.py  agent_definition_versions (each one's immutable versions)
    credential_store.py    credential_store (a project's secrets, encrypted under the operator's key)
    environments.py        environments (a project's named environments)
    environment_versions.py  environment_versions (each one's immutable versions)
    webhooks.py            webhooks (a project's subscriptions to its session events, sealed secrets)
    webhook_deliveries.py  webhook_deliveries (the outbox, filled by a trigger on events; leased)
    webhook_attempts.py    webhook_attempts (the delivery log)
    schedules.py           schedules (a project's cron schedules, each one's next tick)
    schedule_runs.py       schedule_runs (one per schedule and tick: the tick's run and its outcome)
    memory_stores.py       memory_stores (a project's memory stores), session_memory (what each
                           session attached)
    memory_versions.py     memory_versions (every version of every memory document, never updated)
    subagent_calls.py      subagent_calls (a session's calls of its sub-agents, each one's child session)
  agent_definitions/  AgentService: a project's versioned agent definitions, checked against the
                   engines' manifests (its own map)
  environments/    EnvironmentService: a project's versioned environments (its own map)
  memory/          MemoryService: a project's memory stores of versioned documents, what sessions
                   mount of them and what their turns write back (its own map)
  schedules/       ScheduleService: a project's cron schedules and the loop that runs their ticks
                   (its own map)
  credential_store/  CredentialService: a project's secrets encrypted at rest, and RunnerService's
                   ResolveCredentials giving them to the agent a session is placed on (its own map)
  webhooks/        WebhookService and the outbox's dispatcher: signed deliveries of session events (its own map)
  identity/        who calls, what they may do, what they did: keys, tokens, roles, audit (its own
                   map); identity/store.py owns projects and api_keys, identity/audit.py audit_records

The owner functions take the connection, so callers keep their transactions and the order of
their statements (tests/controlplane/test_table_owners.py keeps SQL in its owner). Imports go
downwards: server → identity, api, agent_definitions, environments, relay, deadlines → kernel, conversation, outputs,
verdicts, leases → destructions, turns, tool_grants → agents → journal → store → session, engines.
Nothing here imports `dataplane_agent`.
"""
