"""The data-plane agent: runs sessions' sandboxes and engines on one host, and relays what they do.

One process per host (`python -m dataplane_agent`, `astrabox agent`). Its map:

    main.py          composition root: wires everything below, runs until stopped
    settings.py      every setting: flag, environment variable, default
    state_database.py  the agent's durable store: one SQLite database, its tables, writes group-committed
    state.py         what it records of what it holds: sessions, queued inputs, interactions, applied commands
    errors.py        AgentError, CommandRefused
    health.py        the agent's health in <state dir>/health.json: stream, outbox depth, driver usable
    metrics.py       the Prometheus metrics (`--metrics-listen`): every metric object, read at scrape time
    credentials.py   a session's secrets from the control plane (ResolveCredentials), kept briefly: the
                     egress proxy's bindings and the HTTP MCP servers' credentials, none on disk
    keyed_locks.py   one lock per session id, dropped when unused
    relay/           the one stream to the control plane (RunnerService.Connect)
      client.py        dial, Hello/Welcome, send outputs, acknowledge, heartbeat, redial
      credential.py    the agent's own credential, made once (0600) and presented in every Hello
      outbox.py        outputs stored until the control plane commits them
      committed.py     what the outbox just committed and no stream took yet, in memory (bounded)
      deltas.py        live deltas (text as it is written) waiting for the stream: bounded, merged, not durable
      commands.py      commands from the control plane, applied once each (receipts)
    runtimes/        a session's runtime: its sandbox plus its engine
      runtimes.py      Runtimes: the commands on a session's runtime; hands inputs and answers to `turns`,
                       restarts an engine (after a loss, an idle stop, a restart), recovers
      starts.py        starting one (StartRuntime): environment, sandbox, repository, engine, each phase reported
      endings.py       its end: stopped idle or over its disk limit, destroyed, retained, released
      held.py          what those three share: the stores, the launcher, the turns of the sessions held
      launch.py        makes a sandbox (or claims a warm one) and starts the engine in it
      reconcile.py     after a restart and periodically: the sandboxes on the host vs the sessions held
                       (at start, what an earlier agent process left running in them ended first)
      disk_limit.py    a workspace disk limit enforced by measurement where no image can
      repository.py    a session's git repository cloned into its workspace before the first turn
    turns/           one session's engine and the turns that run on it
      session.py       SessionTurns: the parts below, put together
      ledger.py        the running turn and the attached engine
      inputs.py        queued messages, one turn at a time
      outputs.py       the engine's messages, recorded under their turn
      elision.py       a message too large for the relay, its longest strings elided
      interrupts.py    stopping a turn, with a deadline
      interactions.py  a turn parked on a question for a human
      engine_calls.py  bounded calls into an engine
      transcripts.py   the engine's conversation file, kept outside the sandbox
    workspace/       files and commands of a sandbox, for the control plane's workspace RPCs
      service.py       upload, download, list, run a command
      archives.py      uploaded tar archives checked and rewritten (never tarfile's filters)
    pool/            sandboxes (and engines) made ready ahead of sessions
    routes/          how a sandbox reaches the outside, always through the agent
      model.py         the model route: the engine's model requests, the real key added here
      tokens.py        per-session tokens (HMAC of the session id) both routes admit sandboxes by
      listener.py      the unix socket each route serves its sandboxes on
      egress/          the egress proxy: a sandbox's only way to the network (HTTP, CONNECT)
        proxy.py         the proxy: per-session policy, resolution checked, refusals answered and reported
        policy.py        a session's network policy (NONE, LIMITED, UNRESTRICTED) from its environment
        reports.py       EgressRefused outputs, rate-limited per session
        interception.py  the agent's CA: TLS ended only for hosts a credential is bound to
        bindings.py      credential bindings: one host and port, TLS only unless allow_plain_http (secret out of repr)
    engines/         engine adapters (Claude Code through claude-agent-sdk: claude_code.py, with its
                     transcripts, tool gate and failure messages in claude_*.py), their manifests, and the
                     check at start that the sandbox's user can run the CLI (cli_check.py); a session's
                     agent configuration (agent_config.py) and its SDK options (claude_options.py),
                     its MCP servers (mcp_servers.py: stdio ones in the sandbox; http_mcp.py: HTTP ones
                     reached from the agent, their credentials never in the sandbox, only at public
                     addresses or networks the operator allows: mcp_destinations.py) and skills,
                     installed into the sandbox (skills.py), the client's custom tools, an
                     in-process MCP server (custom_tools.py), and the SDK's partial messages as
                     deltas (partial.py)
    environments/    environment layers: packages fetched on the host (no package code runs), installed
                     in a sandbox without network, one build per digest (a prefix directory the local
                     driver mounts, a derived image for docker), failures in the manager's own words,
                     unused ones swept; BuildLayer commands (build_command.py)
    sandboxes/       sandbox drivers (local bubblewrap, docker), their isolation, limits and disks, and
                     what sandboxes use of the host, sampled for the metrics (usage.py)
    offline_model/   the built-in offline model, an Anthropic-compatible endpoint on loopback

Imports go downwards: main → relay, runtimes → turns, workspace, pool, routes, environments → engines,
sandboxes → state, errors, credentials. Nothing here imports `controlplane` (see the import contracts).
"""
