// Agents: the project's agent definitions, each one's versions, a diff between two versions (of
// their agent files), and applying an agent file (YAML, read as `astrabox agents apply` reads it).
import { useCallback, useEffect, useState, type FormEvent } from "react";
import { diffLines } from "diff";
import { describeError, errorInfo, requestId, type Api } from "../api";
import type { Agent, AgentSpec, AgentVersion } from "../gen/astrabox/agents/v1/agent_pb";
import { AgentFileError, dumpAgentFile, parseAgentFile } from "../agentYaml";
import { when } from "../format";
import { href } from "../router";
import { DefinitionTable } from "./DefinitionTable";

export function Agents({ api, selected }: { api: Api; selected?: string }) {
  const [agents, setAgents] = useState<Agent[]>([]);
  const [showArchived, setShowArchived] = useState(false);
  const [error, setError] = useState("");
  const [refresh, setRefresh] = useState(0);

  useEffect(() => {
    api.agents
      .listAgents({ pageSize: 500, showArchived })
      .then((r) => {
        setAgents(r.agents);
        setError("");
      })
      .catch((e) => setError(describeError(e)));
  }, [api, showArchived, refresh]);

  return (
    <div className="agents">
      <section aria-labelledby="agents-title">
        <div className="section-head">
          <h1 id="agents-title">Agents</h1>
          <label className="check">
            <input type="checkbox" checked={showArchived} onChange={(e) => setShowArchived(e.target.checked)} />
            Show archived
          </label>
        </div>
        {error ? <p role="alert" className="error">{error}</p> : null}
        <DefinitionTable
          rows={agents.map((a) => ({ ...a, id: a.agentId }))}
          selected={selected}
          link={(name) => href({ name: "agents", agent: name })}
          empty="No agents yet: apply an agent file."
        />
        {selected ? <AgentVersions key={`${selected}:${refresh}`} api={api} agent={selected} /> : null}
      </section>
      <ApplyAgentFile api={api} onApplied={() => setRefresh((n) => n + 1)} />
    </div>
  );
}

function AgentVersions({ api, agent }: { api: Api; agent: string }) {
  const [versions, setVersions] = useState<AgentVersion[]>([]);
  const [from, setFrom] = useState(0);
  const [to, setTo] = useState(0);
  const [error, setError] = useState("");
  useEffect(() => {
    api.agents
      .listAgentVersions({ agent, pageSize: 500 })
      .then((r) => {
        setVersions(r.versions);
        const newest = r.versions[0]?.version ?? 0;
        setTo(newest);
        setFrom(r.versions[1]?.version ?? newest);
      })
      .catch((e) => setError(describeError(e)));
  }, [api, agent]);
  const spec = (n: number): AgentSpec | undefined => versions.find((v) => v.version === n)?.spec;
  const fromSpec = spec(from);
  const toSpec = spec(to);
  return (
    <section aria-labelledby="versions-title" className="panel">
      <h2 id="versions-title">{agent}: versions</h2>
      {error ? <p role="alert" className="error">{error}</p> : null}
      <table className="list">
        <thead>
          <tr>
            <th scope="col">Version</th>
            <th scope="col">Made</th>
            <th scope="col">Definition SHA-256</th>
          </tr>
        </thead>
        <tbody>
          {versions.map((v) => (
            <tr key={v.version}>
              <td>v{v.version}</td>
              <td>{when(v.createTime)}</td>
              <td><code>{v.specDigest.slice(0, 16)}</code></td>
            </tr>
          ))}
        </tbody>
      </table>
      {versions.length ? (
        <>
          <div className="diff-pick">
            <label>
              From
              <select value={from} onChange={(e) => setFrom(Number(e.target.value))}>
                {versions.map((v) => <option key={v.version} value={v.version}>v{v.version}</option>)}
              </select>
            </label>
            <label>
              To
              <select value={to} onChange={(e) => setTo(Number(e.target.value))}>
                {versions.map((v) => <option key={v.version} value={v.version}>v{v.version}</option>)}
              </select>
            </label>
          </div>
          {fromSpec && toSpec ? <Diff before={dumpAgentFile(agent, fromSpec)} after={dumpAgentFile(agent, toSpec)} /> : null}
        </>
      ) : null}
    </section>
  );
}

function Diff({ before, after }: { before: string; after: string }) {
  const parts = diffLines(before, after);
  return (
    <pre className="diff" aria-label="Differences between the versions" data-testid="agent-diff">
      {parts.map((part, i) => {
        const sign = part.added ? "+" : part.removed ? "-" : " ";
        const lines = part.value.replace(/\n$/, "").split("\n");
        return (
          <span key={i} className={part.added ? "added" : part.removed ? "removed" : "same"}>
            {lines.map((line) => `${sign} ${line}\n`).join("")}
          </span>
        );
      })}
    </pre>
  );
}

const EXAMPLE = `name: reviewer
description: Reviews pull requests
permission_mode: default
system_prompt:
  append: |
    You review code. Never push.
tools:
  default: ask
  rules:
    - {tool: Read, policy: allow}
limits:
  max_turns: 20
  turn_timeout: 30m
`;

function ApplyAgentFile({ api, onApplied }: { api: Api; onApplied: () => void }) {
  const [text, setText] = useState("");
  const [results, setResults] = useState<string[]>([]);
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);

  const apply = useCallback(
    async (e: FormEvent) => {
      e.preventDefault();
      setBusy(true);
      setError("");
      setResults([]);
      try {
        const agents = parseAgentFile(text); // all of them first: a mistake in one applies nothing
        const done: string[] = [];
        for (const { name, spec } of agents) {
          done.push(await applyOne(api, name, spec));
          setResults([...done]);
        }
        onApplied();
      } catch (err) {
        setError(err instanceof AgentFileError ? `The agent file: ${err.message}` : describeError(err));
      } finally {
        setBusy(false);
      }
    },
    [api, text, onApplied],
  );

  return (
    <section aria-labelledby="apply-title" className="panel">
      <h2 id="apply-title">Apply an agent file</h2>
      <form onSubmit={apply} className="stack">
        <label htmlFor="agent-yaml">Agent YAML (one agent per document, separated by ---)</label>
        <textarea id="agent-yaml" rows={16} spellCheck={false} className="code" value={text} onChange={(e) => setText(e.target.value)} placeholder={EXAMPLE} />
        <div className="buttons">
          <button type="submit" disabled={busy || !text.trim()}>Apply</button>
          <button type="button" onClick={() => setText(EXAMPLE)}>Insert an example</button>
        </div>
      </form>
      {results.length ? (
        <ul role="status" className="applied" data-testid="apply-results">
          {results.map((r) => <li key={r}>{r}</li>)}
        </ul>
      ) : null}
      {error ? <p role="alert" className="error">{error}</p> : null}
    </section>
  );
}

/** Creates the agent, or gives it a new version (none when unchanged), as `astrabox agents apply` does. */
async function applyOne(api: Api, name: string, spec: AgentSpec): Promise<string> {
  const update = async () => {
    const r = await api.agents.updateAgent({ agent: name, spec });
    return `${name} v${r.version?.version} (${r.created ? "new version" : "unchanged"})`;
  };
  try {
    return await update();
  } catch (error) {
    if (errorInfo(error)?.reason !== "AGENT_NOT_FOUND") throw error;
  }
  try {
    const r = await api.agents.createAgent({ requestId: requestId("agent"), name, spec });
    return `created ${name} v${r.version?.version}`;
  } catch (error) {
    if (errorInfo(error)?.reason !== "AGENT_ALREADY_EXISTS") throw error;
    return await update();
  }
}
