"""Agent definitions: what runs in a session, defined once per project and versioned (AgentService).

    specs.py        what an AgentSpec may hold: its documented bounds, and the engine's manifest
                    (tools, permission modes); its canonical form and digest
    definitions.py  create, get, list, update (a new version per change), archive; resolve the
                    version a new session pins
    api.py          AgentService: protobuf in, definitions within the caller's project, protobuf out

"Agents" elsewhere in `controlplane` are the data-plane hosts (`controlplane.agents`); the
definitions are "agents" only to users. The tables are `agent_definitions` and
`agent_definition_versions` (`controlplane.store`).
"""
