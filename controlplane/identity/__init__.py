"""Identity: who calls the control plane, and what they may do.

callers.py        Role, Caller, the current call's caller (a context variable)
keys.py           the API key's form; made, parsed and checked (SHA-256, constant time)
tokens.py         single sign-on: OIDC JWTs verified (PyJWT) against a JWKS file or URL
store.py          the `projects` and `api_keys` tables' statements
rules.py          the role each RPC needs (RULES, one table for every client-facing service)
authenticator.py  the gRPC interceptor: credential → Caller (cached) → rule → handler
admin.py          AdminService: projects, keys and the audit trail
tenancy.py        a request naming a session admitted only for the session's project (at the edge)
agent_admission.py  which agents may connect: agent_id bound to its credential, revocation
audit.py          the `audit_records` table: every mutating call, its caller and outcome
bootstrap.py      the first admin key (--bootstrap-key-file)
"""
