// Sessions: the project's sessions with their state, agent, environment, labels, usage and cost,
// filtered as ListSessions allows and paged by its tokens; and a form to create one.
import { useCallback, useEffect, useState, type FormEvent } from "react";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describeError, requestId, type Api } from "../api";
import { SessionState, type Session } from "../gen/astrabox/sessionkernel/v1/session_pb";
import { cost, shortId, stateName, tokens, when } from "../format";
import { href } from "../router";
import { queueFirstMessage } from "../firstMessage";

const STATES = [
  SessionState.CREATING,
  SessionState.READY,
  SessionState.RUNNING,
  SessionState.WAITING_FOR_INPUT,
  SessionState.INTERRUPTING,
  SessionState.ARCHIVED,
  SessionState.FAILED,
];

interface Filters {
  states: SessionState[];
  agent: string;
  labelSelector: string;
  createdAfter: string;
  createdBefore: string;
}

const NO_FILTERS: Filters = { states: [], agent: "", labelSelector: "", createdAfter: "", createdBefore: "" };

export function Sessions({ api }: { api: Api }) {
  const [draft, setDraft] = useState<Filters>(NO_FILTERS);
  const [filters, setFilters] = useState<Filters>(NO_FILTERS);
  const [tokens_, setTokens] = useState<string[]>([""]); // the page tokens of the pages seen, this one last
  const [sessions, setSessions] = useState<Session[]>([]);
  const [next, setNext] = useState("");
  const [error, setError] = useState("");
  const [loading, setLoading] = useState(true); // "No sessions." only once ListSessions said so
  const [refresh, setRefresh] = useState(0);
  const pageToken = tokens_[tokens_.length - 1];

  useEffect(() => {
    let stale = false;
    setLoading(true);
    api.sessions
      .listSessions({
        pageSize: 25,
        pageToken,
        states: filters.states,
        agent: filters.agent,
        labelSelector: filters.labelSelector,
        createdAfter: filters.createdAfter ? timestampFromDate(new Date(filters.createdAfter)) : undefined,
        createdBefore: filters.createdBefore ? timestampFromDate(new Date(filters.createdBefore)) : undefined,
      })
      .then((r) => {
        if (stale) return;
        setSessions(r.sessions);
        setNext(r.nextPageToken);
        setError("");
      })
      .catch((e) => !stale && setError(describeError(e)))
      .finally(() => !stale && setLoading(false));
    return () => {
      stale = true;
    };
  }, [api, filters, pageToken, refresh]);

  const apply = (e: FormEvent) => {
    e.preventDefault();
    setFilters(draft);
    setTokens([""]);
  };
  const toggleState = (state: SessionState) =>
    setDraft((d) => ({ ...d, states: d.states.includes(state) ? d.states.filter((s) => s !== state) : [...d.states, state] }));

  return (
    <div className="sessions">
      <section aria-labelledby="sessions-title">
        <div className="section-head">
          <h1 id="sessions-title">Sessions</h1>
          <button type="button" onClick={() => setRefresh((n) => n + 1)}>Refresh</button>
        </div>
        <form className="filters" onSubmit={apply} aria-label="Filter sessions">
          <fieldset>
            <legend>State</legend>
            {STATES.map((s) => (
              <label key={s} className="check">
                <input type="checkbox" checked={draft.states.includes(s)} onChange={() => toggleState(s)} />
                {stateName(s)}
              </label>
            ))}
          </fieldset>
          <label>
            Agent
            <input value={draft.agent} onChange={(e) => setDraft({ ...draft, agent: e.target.value })} placeholder="name or id" />
          </label>
          <label>
            Labels
            <input
              value={draft.labelSelector}
              onChange={(e) => setDraft({ ...draft, labelSelector: e.target.value })}
              placeholder="team=red,!draft"
            />
          </label>
          <label>
            Created after
            <input type="datetime-local" value={draft.createdAfter} onChange={(e) => setDraft({ ...draft, createdAfter: e.target.value })} />
          </label>
          <label>
            Created before
            <input type="datetime-local" value={draft.createdBefore} onChange={(e) => setDraft({ ...draft, createdBefore: e.target.value })} />
          </label>
          <div className="buttons">
            <button type="submit">Apply filters</button>
            <button type="button" onClick={() => { setDraft(NO_FILTERS); setFilters(NO_FILTERS); setTokens([""]); }}>Clear</button>
          </div>
        </form>
        {error ? <p role="alert" className="error">{error}</p> : null}
        <table className="list" aria-busy={loading}>
          <thead>
            <tr>
              <th scope="col">Session</th>
              <th scope="col">State</th>
              <th scope="col">Agent</th>
              <th scope="col">Environment</th>
              <th scope="col">Labels</th>
              <th scope="col">Usage</th>
              <th scope="col">Cost</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {sessions.map((s) => (
              <tr key={s.sessionId}>
                <td><a href={href({ name: "session", id: s.sessionId })} title={s.sessionId}>{shortId(s.sessionId)}</a></td>
                <td><span className={`state state-${SessionState[s.state]?.toLowerCase()}`}>{stateName(s.state)}</span></td>
                <td>{s.agent ? `${s.agent.name} v${s.agent.version}` : "—"}</td>
                <td>{s.environment ? `${s.environment.name} v${s.environment.version}` : "built-in"}</td>
                <td>{Object.entries(s.labels).map(([k, v]) => <span key={k} className="label">{v ? `${k}=${v}` : k}</span>)}</td>
                <td>{s.usage ? `${s.usage.turns} turns, ${tokens(s.usage)}` : "—"}</td>
                <td>{cost(s.usage?.costUsd ?? 0)}</td>
                <td>{when(s.createTime)}</td>
              </tr>
            ))}
            {!sessions.length && !loading ? (
              <tr><td colSpan={8} className="empty">No sessions.</td></tr>
            ) : null}
          </tbody>
        </table>
        <div className="pager">
          <button type="button" disabled={tokens_.length < 2} onClick={() => setTokens((t) => t.slice(0, -1))}>Previous page</button>
          <span>Page {tokens_.length}</span>
          <button type="button" disabled={!next} onClick={() => setTokens((t) => [...t, next])}>Next page</button>
        </div>
      </section>
      <CreateSession api={api} />
    </div>
  );
}

function CreateSession({ api }: { api: Api }) {
  const [agents, setAgents] = useState<string[]>([]);
  const [environments, setEnvironments] = useState<string[]>([]);
  const [agent, setAgent] = useState("");
  const [agentVersion, setAgentVersion] = useState("");
  const [environment, setEnvironment] = useState("");
  const [permissionMode, setPermissionMode] = useState("");
  const [model, setModel] = useState("");
  const [labels, setLabels] = useState("");
  const [message, setMessage] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");

  useEffect(() => {
    api.agents.listAgents({ pageSize: 500 }).then((r) => setAgents(r.agents.map((a) => a.name)), () => setAgents([]));
    api.environments.listEnvironments({ pageSize: 500 }).then((r) => setEnvironments(r.environments.map((e) => e.name)), () => setEnvironments([]));
  }, [api]);

  const submit = useCallback(
    async (e: FormEvent) => {
      e.preventDefault();
      setBusy(true);
      setError("");
      try {
        const parsed: Record<string, string> = {};
        for (const part of labels.split(",").map((p) => p.trim()).filter(Boolean)) {
          const at = part.indexOf("=");
          if (at < 0) parsed[part] = "";
          else parsed[part.slice(0, at).trim()] = part.slice(at + 1).trim();
        }
        const { session } = await api.sessions.createSession({
          requestId: requestId("create"),
          agent,
          agentVersion: agentVersion ? Number(agentVersion) : 0,
          environment,
          permissionMode,
          model,
          labels: parsed,
        });
        if (!session) throw new Error("the service returned no session");
        if (message.trim()) {
          // A session takes messages once it is ready: its screen sends this one then, with this id
          // (idempotent, so a reload meanwhile cannot send it twice).
          queueFirstMessage(session.sessionId, { clientMessageId: requestId("msg"), text: message });
        }
        window.location.hash = href({ name: "session", id: session.sessionId });
      } catch (err) {
        setError(describeError(err));
      } finally {
        setBusy(false);
      }
    },
    [api, agent, agentVersion, environment, permissionMode, model, labels, message],
  );

  return (
    <section aria-labelledby="create-title" className="panel">
      <h2 id="create-title">New session</h2>
      <form onSubmit={submit} className="stack">
        <label htmlFor="new-session-agent">Agent</label>
        <select id="new-session-agent" value={agent} onChange={(e) => setAgent(e.target.value)}>
            <option value="">None (engine defaults)</option>
            {agents.map((a) => <option key={a} value={a}>{a}</option>)}
        </select>
        <label>
          Agent version
          <input type="number" min={0} value={agentVersion} onChange={(e) => setAgentVersion(e.target.value)} placeholder="newest" disabled={!agent} />
        </label>
        <label htmlFor="new-session-environment">Environment</label>
        <select id="new-session-environment" value={environment} onChange={(e) => setEnvironment(e.target.value)}>
            <option value="">Built-in</option>
            {environments.map((n) => <option key={n} value={n}>{n}</option>)}
        </select>
        <label>
          Permission mode
          <input list="permission-modes" value={permissionMode} onChange={(e) => setPermissionMode(e.target.value)} placeholder="the engine's default" />
          <datalist id="permission-modes">
            <option value="default" />
            <option value="acceptEdits" />
            <option value="plan" />
            <option value="bypassPermissions" />
          </datalist>
        </label>
        <label>
          Model
          <input value={model} onChange={(e) => setModel(e.target.value)} placeholder="the engine's default" />
        </label>
        <label>
          Labels
          <input value={labels} onChange={(e) => setLabels(e.target.value)} placeholder="team=red, draft" />
        </label>
        <label>
          First message
          <textarea rows={4} value={message} onChange={(e) => setMessage(e.target.value)} placeholder="optional: sent once the session is created" />
        </label>
        <button type="submit" disabled={busy}>{busy ? "Creating…" : "Create session"}</button>
        {error ? <p role="alert" className="error">{error}</p> : null}
      </form>
    </section>
  );
}
