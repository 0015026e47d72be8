"""The credential store: a project's named secrets, encrypted at rest under the operator's key
(CredentialService), and given to the agent running a session whose environment binds them
(RunnerService.ResolveCredentials), for its egress proxy to add to requests on the way out.

    cipher.py       AES-256-GCM under the operator's key (never the database's): seal, open, key ids,
                    the key file (0600, this user's), rotation through previous keys
    credentials.py  put (a new version per replacement), list, delete; a session's bindings resolved
    api.py          CredentialService: protobuf in, the caller's project's credentials, protobuf out
    resolve.py      RunnerService.ResolveCredentials: the placed agent, authenticated, gets the secrets

"Credentials" in `controlplane.identity` are API keys and tokens; these are the secrets the
sandbox's requests carry. The table is `credential_store` (`controlplane.store`).
"""
