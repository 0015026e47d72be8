"""Environments: where a project's sessions run, defined once per project and versioned
(EnvironmentService): packages, a setup script, variables, resource limits, the network policy and
the credentials its requests get on the way out.

    specs.py        what an EnvironmentSpec may hold: its documented bounds; its canonical form,
                    spec digest and build digest
    definitions.py  create, get, list, update (a new version per change), archive; resolve the
                    version a new session pins
    api.py          EnvironmentService: protobuf in, definitions within the caller's project, protobuf out

Named, referred to, numbered and paged as agent definitions are (`controlplane.named_definitions`).
The tables are `environments` and `environment_versions` (`controlplane.store`).
"""
