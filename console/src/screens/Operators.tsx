// Operators (an operator project's admins): hosts (admit, cordon, uncordon, drain), the project's
// API keys (create, shown once; revoke), its quotas, and the audit trail.
import { useCallback, useEffect, useState, type FormEvent } from "react";
import { describeError, type Api } from "../api";
import {
  Role,
  type Agent as Host,
  type AgentStatus,
  type ApiKey,
  type AuditRecord,
  type GetQuotasResponse,
} from "../gen/astrabox/admin/v1/admin_service_pb";
import { when } from "../format";

export function Operators({ api }: { api: Api }) {
  return (
    <div className="operators">
      <h1>Operators</h1>
      <Hosts api={api} />
      <Keys api={api} />
      <Quotas api={api} />
      <Audit api={api} />
    </div>
  );
}

function useLoad<T>(load: () => Promise<T>): [T | undefined, string, () => void] {
  const [value, setValue] = useState<T>();
  const [error, setError] = useState("");
  const reload = useCallback(() => {
    load().then(
      (v) => {
        setValue(v);
        setError("");
      },
      (e) => setError(describeError(e)),
    );
  }, [load]);
  useEffect(reload, [reload]);
  return [value, error, reload];
}

function Hosts({ api }: { api: Api }) {
  const load = useCallback(async () => {
    const [hosts, status] = await Promise.all([api.admin.listAgents({}), api.admin.getStatus({ pageSize: 500 })]);
    return { hosts: hosts.agents, status: new Map(status.agents.map((a) => [a.agentId, a])) };
  }, [api]);
  const [data, error, reload] = useLoad(load);
  const [actionError, setActionError] = useState("");
  const act = async (action: () => Promise<unknown>) => {
    setActionError("");
    try {
      await action();
    } catch (e) {
      setActionError(describeError(e));
    }
    reload();
  };
  const state = (host: Host, status: AgentStatus | undefined): string => {
    if (host.revokeTime) return "revoked";
    if (!host.admitTime) return "pending admission";
    if (!status) return "never connected";
    const hold = status.drainDeadline ? "draining" : status.cordonTime ? "cordoned" : "";
    return [status.connected ? "connected" : "disconnected", hold].filter(Boolean).join(", ");
  };
  return (
    <section aria-labelledby="hosts-title" className="panel">
      <div className="section-head">
        <h2 id="hosts-title">Hosts</h2>
        <button type="button" onClick={reload}>Refresh</button>
      </div>
      {error || actionError ? <p role="alert" className="error">{error || actionError}</p> : null}
      <table className="list">
        <thead>
          <tr>
            <th scope="col">Host</th>
            <th scope="col">Fingerprint</th>
            <th scope="col">State</th>
            <th scope="col">Sessions</th>
            <th scope="col">Actions</th>
          </tr>
        </thead>
        <tbody>
          {data?.hosts.map((host) => {
            const status = data.status.get(host.agentId);
            return (
              <tr key={host.agentId}>
                <td>{host.agentId}</td>
                <td><code>{host.fingerprint}</code></td>
                <td>{state(host, status)}</td>
                <td>{status ? `${status.liveSessions}/${status.capacity} live, ${status.placedSessions} placed` : ""}</td>
                <td className="buttons">
                  {!host.admitTime && !host.revokeTime ? (
                    <button type="button" onClick={() => act(() => api.admin.admitAgent({ agentId: host.agentId }))}>Admit</button>
                  ) : null}
                  {status && !status.cordonTime ? (
                    <button type="button" onClick={() => act(() => api.admin.cordonAgent({ agentId: host.agentId }))}>Cordon</button>
                  ) : null}
                  {status?.cordonTime ? (
                    <button type="button" onClick={() => act(() => api.admin.uncordonAgent({ agentId: host.agentId }))}>Uncordon</button>
                  ) : null}
                  {status && !status.drainDeadline ? (
                    <button type="button" onClick={() => act(() => api.admin.drainAgent({ agentId: host.agentId, timeoutSeconds: 1800 }))}>Drain</button>
                  ) : null}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </section>
  );
}

function Keys({ api }: { api: Api }) {
  const load = useCallback(() => api.admin.listApiKeys({}).then((r) => r.keys), [api]);
  const [keys, error, reload] = useLoad<ApiKey[]>(load);
  const [name, setName] = useState("");
  const [role, setRole] = useState(Role.DEVELOPER);
  const [secret, setSecret] = useState("");
  const [actionError, setActionError] = useState("");
  const create = async (e: FormEvent) => {
    e.preventDefault();
    setActionError("");
    try {
      const r = await api.admin.createApiKey({ name, role });
      setSecret(r.secret);
      setName("");
      reload();
    } catch (err) {
      setActionError(describeError(err));
    }
  };
  const revoke = async (keyId: string) => {
    if (!window.confirm(`Revoke key ${keyId}? Calls made with it are refused from then on.`)) return;
    try {
      await api.admin.revokeApiKey({ keyId });
    } catch (err) {
      setActionError(describeError(err));
    }
    reload();
  };
  return (
    <section aria-labelledby="keys-title" className="panel">
      <h2 id="keys-title">API keys</h2>
      {error || actionError ? <p role="alert" className="error">{error || actionError}</p> : null}
      {secret ? (
        <div className="secret" role="status">
          <p>The new key, shown only now: copy it.</p>
          <label>
            New key
            <input readOnly value={secret} onFocus={(e) => e.target.select()} />
          </label>
          <button type="button" onClick={() => setSecret("")}>Done</button>
        </div>
      ) : null}
      <form className="inline" onSubmit={create}>
        <label>
          Name
          <input value={name} onChange={(e) => setName(e.target.value)} required maxLength={128} />
        </label>
        <label>
          Role
          <select value={role} onChange={(e) => setRole(Number(e.target.value) as Role)}>
            <option value={Role.VIEWER}>viewer</option>
            <option value={Role.DEVELOPER}>developer</option>
            <option value={Role.ADMIN}>admin</option>
          </select>
        </label>
        <button type="submit">Create key</button>
      </form>
      <table className="list">
        <thead>
          <tr>
            <th scope="col">Key</th>
            <th scope="col">Name</th>
            <th scope="col">Role</th>
            <th scope="col">Created</th>
            <th scope="col">Last used</th>
            <th scope="col">Status</th>
          </tr>
        </thead>
        <tbody>
          {keys?.map((k) => (
            <tr key={k.keyId}>
              <td><code>{k.keyId}</code></td>
              <td>{k.name}</td>
              <td>{(Role[k.role] ?? "").toLowerCase()}</td>
              <td>{when(k.createTime)}</td>
              <td>{when(k.lastUseTime)}</td>
              <td>
                {k.revokeTime ? `revoked ${when(k.revokeTime)}` : (
                  <button type="button" onClick={() => revoke(k.keyId)} aria-label={`Revoke key ${k.keyId}`}>Revoke</button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

function Quotas({ api }: { api: Api }) {
  const load = useCallback(() => api.admin.getQuotas({}), [api]);
  const [quotas, error] = useLoad<GetQuotasResponse>(load);
  const e = quotas?.effective;
  const u = quotas?.usage;
  return (
    <section aria-labelledby="quotas-title" className="panel">
      <h2 id="quotas-title">Quotas of this project</h2>
      {error ? <p role="alert" className="error">{error}</p> : null}
      {e ? (
        <dl className="facts">
          <dt>Live sessions</dt>
          <dd>{u?.liveSessions ?? 0} of {e.liveSessions}</dd>
          <dt>Sessions per minute</dt>
          <dd>{u?.sessionsPerMinute ?? 0} of {e.sessionsPerMinute}</dd>
          <dt>Commands at once</dt>
          <dd>{u?.concurrentCommands ?? 0} of {e.concurrentCommands}</dd>
          <dt>Message size</dt>
          <dd>{e.messageBytes} bytes</dd>
          <dt>Upload size</dt>
          <dd>{String(e.uploadBytes)} bytes</dd>
        </dl>
      ) : null}
    </section>
  );
}

function Audit({ api }: { api: Api }) {
  const [pages, setPages] = useState<string[]>([""]);
  const token = pages[pages.length - 1];
  const load = useCallback(() => api.admin.listAuditRecords({ pageSize: 25, pageToken: token }), [api, token]);
  const [page, error] = useLoad(load);
  return (
    <section aria-labelledby="audit-title" className="panel">
      <h2 id="audit-title">Audit trail</h2>
      {error ? <p role="alert" className="error">{error}</p> : null}
      <table className="list">
        <thead>
          <tr>
            <th scope="col">Time</th>
            <th scope="col">Actor</th>
            <th scope="col">Call</th>
            <th scope="col">Outcome</th>
            <th scope="col">Details</th>
          </tr>
        </thead>
        <tbody>
          {page?.records.map((r: AuditRecord) => (
            <tr key={String(r.recordId)}>
              <td>{when(r.time)}</td>
              <td>{r.actor}</td>
              <td>{r.method}</td>
              <td>{r.code}</td>
              <td>{[r.sessionId && `session ${r.sessionId}`, ...Object.entries(r.details).map(([k, v]) => `${k}=${v}`)].filter(Boolean).join(", ")}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <div className="pager">
        <button type="button" disabled={pages.length < 2} onClick={() => setPages((p) => p.slice(0, -1))}>Newer</button>
        <button type="button" disabled={!page?.nextPageToken} onClick={() => page && setPages((p) => [...p, page.nextPageToken])}>Older</button>
      </div>
    </section>
  );
}
