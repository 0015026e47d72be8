"""Who may call what: the role each RPC needs, one table for every client-facing service.

The authenticator looks each call up here before its handler runs; a method
missing from `RULES` is refused (and `tests/controlplane/test_authorization.py`,
generated from the service descriptors, fails), so a new RPC cannot ship open
by accident. Health and reflection are open; RunnerService authenticates its
own callers (agents by enrollment, replicas by the cluster secret).
"""

from __future__ import annotations

from dataclasses import dataclass

from astrabox.admin.v1 import admin_service_pb2
from astrabox.agents.v1 import agent_service_pb2
from astrabox.credentialstore.v1 import credential_service_pb2
from astrabox.environments.v1 import environment_service_pb2
from astrabox.memory.v1 import memory_service_pb2
from astrabox.schedules.v1 import schedule_service_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2
from astrabox.webhooks.v1 import webhook_service_pb2
from controlplane.identity.callers import Caller, Role

KERNEL = session_kernel_service_pb2.DESCRIPTOR.services_by_name["SessionKernelService"].full_name
ADMIN = admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
AGENTS = agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
CREDENTIALS = credential_service_pb2.DESCRIPTOR.services_by_name["CredentialService"].full_name
ENVIRONMENTS = environment_service_pb2.DESCRIPTOR.services_by_name["EnvironmentService"].full_name
WEBHOOKS = webhook_service_pb2.DESCRIPTOR.services_by_name["WebhookService"].full_name
SCHEDULES = schedule_service_pb2.DESCRIPTOR.services_by_name["ScheduleService"].full_name
MEMORY = memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name
# The services whose every call is authenticated.
GUARDED_SERVICES = (KERNEL, ADMIN, AGENTS, CREDENTIALS, ENVIRONMENTS, WEBHOOKS, SCHEDULES, MEMORY)


@dataclass(frozen=True, slots=True)
class Rule:
    role: Role
    # Only an admin of an operator project.
    operator: bool = False
    # The call changes something (or runs something in a sandbox): each one is audited
    # (`identity.audit`), whatever its outcome.
    mutates: bool = False

    def allows(self, caller: Caller) -> bool:
        return caller.role >= self.role and (caller.operator or not self.operator)

    @property
    def needs(self) -> str:
        return f"{self.role.label} (of an operator project)" if self.operator else self.role.label


_VIEW = Rule(Role.VIEWER)
_READ_FILES = Rule(Role.DEVELOPER)
_DRIVE = Rule(Role.DEVELOPER, mutates=True)
_MANAGE = Rule(Role.ADMIN)
_MANAGE_AND_CHANGE = Rule(Role.ADMIN, mutates=True)

_KERNEL_RULES = {
    "GetSession": _VIEW,
    "ListSessions": _VIEW,
    "WatchSessionEvents": _VIEW,
    "ListSessionEvents": _VIEW,
    "CreateSession": _DRIVE,
    "SendMessage": _DRIVE,
    "InterruptTurn": _DRIVE,
    "RespondToInteraction": _DRIVE,
    "SetPermissionMode": _DRIVE,
    "ArchiveSession": _DRIVE,
    "DeleteSession": _DRIVE,
    "StopBackgroundTask": _DRIVE,
    "RevokeToolGrant": _DRIVE,
    # Files and commands reach into the sandbox: a developer's, not a viewer's.
    "UploadWorkspaceArchive": _DRIVE,
    "ListWorkspace": _READ_FILES,
    "DownloadWorkspaceArchive": _READ_FILES,
    "RunCommand": _DRIVE,
    "OpenTerminal": _DRIVE,
    # A fork reads the source's files into a new session: whoever may create sessions and read files.
    "ForkSession": _DRIVE,
}
_ADMIN_RULES = {
    "WhoAmI": _VIEW,
    "CreateProject": Rule(Role.ADMIN, operator=True, mutates=True),
    # An operator admin lists every project, another admin its own (AdminServicer).
    "ListProjects": _MANAGE,
    "CreateApiKey": _MANAGE_AND_CHANGE,
    "ListApiKeys": _MANAGE,
    "RevokeApiKey": _MANAGE_AND_CHANGE,
    "ListAuditRecords": _MANAGE,
    "ListAgents": Rule(Role.ADMIN, operator=True),
    "RevokeAgent": Rule(Role.ADMIN, operator=True, mutates=True),
    "DedicateAgent": Rule(Role.ADMIN, operator=True, mutates=True),
    "AdmitAgent": Rule(Role.ADMIN, operator=True, mutates=True),
    "CreateJoinToken": Rule(Role.ADMIN, operator=True, mutates=True),
    # A project's admin chooses where its own credentials may go; an operator admin for any project.
    "SetCredentialHosts": _MANAGE_AND_CHANGE,
    "GetStatus": Rule(Role.ADMIN, operator=True),
    "CordonAgent": Rule(Role.ADMIN, operator=True, mutates=True),
    "UncordonAgent": Rule(Role.ADMIN, operator=True, mutates=True),
    "DrainAgent": Rule(Role.ADMIN, operator=True, mutates=True),
    # Any key reads its own project's quotas (AdminServicer); an operator admin any project's.
    "GetQuotas": _VIEW,
    # Quotas are the platform's limits on a project: its own admin may not raise them.
    "SetQuotas": Rule(Role.ADMIN, operator=True, mutates=True),
}
# Agent definitions: whoever may start sessions may define what runs in them.
_AGENT_RULES = {
    "GetAgent": _VIEW,
    "ListAgents": _VIEW,
    "ListAgentVersions": _VIEW,
    "CreateAgent": _DRIVE,
    "UpdateAgent": _DRIVE,
    "ArchiveAgent": _DRIVE,
}

# Credentials: whoever may change agents may store the secrets their sessions use; anyone may list
# them (names and descriptions only: no call reads a secret back). Each change is audited.
_CREDENTIAL_RULES = {
    "ListCredentials": _VIEW,
    "PutCredential": _DRIVE,
    "DeleteCredential": _DRIVE,
}

# Environments: whoever may start sessions may define where they run (as agent definitions).
_ENVIRONMENT_RULES = {
    "GetEnvironment": _VIEW,
    "ListEnvironments": _VIEW,
    "ListEnvironmentVersions": _VIEW,
    "CreateEnvironment": _DRIVE,
    "UpdateEnvironment": _DRIVE,
    "ArchiveEnvironment": _DRIVE,
    "BuildEnvironment": _DRIVE,
}

# Webhooks send the project's events out of the installation, signed with secrets only they show:
# its admins' to manage, and to read (a delivery's payload names sessions and turns).
_WEBHOOK_RULES = {
    "CreateWebhook": _MANAGE_AND_CHANGE,
    "ListWebhooks": _MANAGE,
    "GetWebhook": _MANAGE,
    "UpdateWebhook": _MANAGE_AND_CHANGE,
    "DeleteWebhook": _MANAGE_AND_CHANGE,
    "RotateWebhookSecret": _MANAGE_AND_CHANGE,
    "ListWebhookDeliveries": _MANAGE,
    "RedeliverWebhook": _MANAGE_AND_CHANGE,
}

# Schedules start sessions: whoever may start sessions may schedule them; anyone reads them and
# their history.
_SCHEDULE_RULES = {
    "GetSchedule": _VIEW,
    "ListSchedules": _VIEW,
    "ListScheduleRuns": _VIEW,
    "CreateSchedule": _DRIVE,
    "UpdateSchedule": _DRIVE,
    "DeleteSchedule": _DRIVE,
    "PauseSchedule": _DRIVE,
    "ResumeSchedule": _DRIVE,
}

# Memory is what sessions read and write: whoever may drive sessions may change it; anyone reads it
# and its history.
_MEMORY_RULES = {
    "GetMemoryStore": _VIEW,
    "ListMemoryStores": _VIEW,
    "GetMemoryDocument": _VIEW,
    "ListMemoryDocuments": _VIEW,
    "ListMemoryDocumentVersions": _VIEW,
    "CreateMemoryStore": _DRIVE,
    "DeleteMemoryStore": _DRIVE,
    "WriteMemoryDocument": _DRIVE,
    "DeleteMemoryDocument": _DRIVE,
    "RestoreMemoryStore": _DRIVE,
}

RULES: dict[str, Rule] = {
    **{f"/{KERNEL}/{name}": rule for name, rule in _KERNEL_RULES.items()},
    **{f"/{ADMIN}/{name}": rule for name, rule in _ADMIN_RULES.items()},
    **{f"/{AGENTS}/{name}": rule for name, rule in _AGENT_RULES.items()},
    **{f"/{CREDENTIALS}/{name}": rule for name, rule in _CREDENTIAL_RULES.items()},
    **{f"/{ENVIRONMENTS}/{name}": rule for name, rule in _ENVIRONMENT_RULES.items()},
    **{f"/{WEBHOOKS}/{name}": rule for name, rule in _WEBHOOK_RULES.items()},
    **{f"/{SCHEDULES}/{name}": rule for name, rule in _SCHEDULE_RULES.items()},
    **{f"/{MEMORY}/{name}": rule for name, rule in _MEMORY_RULES.items()},
}
