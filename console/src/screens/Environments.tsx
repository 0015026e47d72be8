// Environments: the project's environments, each one's versions with their definitions, and a
// build of a version on an agent's host followed as it progresses (BuildEnvironment).
import { useEffect, useRef, useState } from "react";
import { toJsonString } from "@bufbuild/protobuf";
import { describeError, isAbort, type Api } from "../api";
import {
  BuildState,
  EnvironmentSpecSchema,
  type BuildProgress,
  type Environment,
  type EnvironmentVersion,
} from "../gen/astrabox/environments/v1/environment_pb";
import { when } from "../format";
import { href } from "../router";
import { DefinitionTable } from "./DefinitionTable";

export function Environments({ api, selected }: { api: Api; selected?: string }) {
  const [environments, setEnvironments] = useState<Environment[]>([]);
  const [showArchived, setShowArchived] = useState(false);
  const [error, setError] = useState("");
  useEffect(() => {
    api.environments
      .listEnvironments({ pageSize: 500, showArchived })
      .then((r) => {
        setEnvironments(r.environments);
        setError("");
      })
      .catch((e) => setError(describeError(e)));
  }, [api, showArchived]);
  return (
    <div className="environments">
      <section aria-labelledby="environments-title">
        <div className="section-head">
          <h1 id="environments-title">Environments</h1>
          <label className="check">
            <input type="checkbox" checked={showArchived} onChange={(e) => setShowArchived(e.target.checked)} />
            Show archived
          </label>
        </div>
        <p className="hint">Define environments with <code>astrabox environments apply FILE</code>; here you see them and build their versions.</p>
        {error ? <p role="alert" className="error">{error}</p> : null}
        <DefinitionTable
          rows={environments.map((e) => ({ ...e, id: e.environmentId }))}
          selected={selected}
          link={(name) => href({ name: "environments", environment: name })}
          empty="No environments: sessions run in the built-in one."
        />
      </section>
      {selected ? <EnvironmentVersions key={selected} api={api} environment={selected} /> : null}
    </div>
  );
}

function EnvironmentVersions({ api, environment }: { api: Api; environment: string }) {
  const [versions, setVersions] = useState<EnvironmentVersion[]>([]);
  const [shown, setShown] = useState(0);
  const [error, setError] = useState("");
  useEffect(() => {
    api.environments
      .listEnvironmentVersions({ environment, pageSize: 500 })
      .then((r) => {
        setVersions(r.versions);
        setShown(r.versions[0]?.version ?? 0);
      })
      .catch((e) => setError(describeError(e)));
  }, [api, environment]);
  const version = versions.find((v) => v.version === shown);
  return (
    <section aria-labelledby="environment-versions-title" className="panel">
      <h2 id="environment-versions-title">{environment}: versions</h2>
      {error ? <p role="alert" className="error">{error}</p> : null}
      <table className="list">
        <thead>
          <tr>
            <th scope="col">Version</th>
            <th scope="col">Made</th>
            <th scope="col">Build digest</th>
            <th scope="col"><span className="visually-hidden">Actions</span></th>
          </tr>
        </thead>
        <tbody>
          {versions.map((v) => (
            <tr key={v.version} aria-selected={v.version === shown}>
              <td>v{v.version}</td>
              <td>{when(v.createTime)}</td>
              <td><code>{v.buildDigest.slice(0, 16)}</code></td>
              <td><button type="button" onClick={() => setShown(v.version)} aria-label={`Show v${v.version}`}>Show</button></td>
            </tr>
          ))}
        </tbody>
      </table>
      {version ? (
        <>
          <h3>v{version.version}</h3>
          <pre className="definition">{version.spec ? toJsonString(EnvironmentSpecSchema, version.spec, { prettySpaces: 2 }) : "{}"}</pre>
          {version.buildDigest ? (
            <Build api={api} environment={environment} version={version.version} />
          ) : (
            <p className="hint">Nothing to build: no packages and no setup script (its sessions start on the plain sandbox).</p>
          )}
        </>
      ) : null}
    </section>
  );
}

function Build({ api, environment, version }: { api: Api; environment: string; version: number }) {
  const [progress, setProgress] = useState<BuildProgress[]>([]);
  const [running, setRunning] = useState(false);
  const [error, setError] = useState("");
  const abort = useRef<AbortController | undefined>(undefined);
  useEffect(() => () => abort.current?.abort(), []);
  const build = async () => {
    abort.current?.abort();
    const controller = new AbortController();
    abort.current = controller;
    setProgress([]);
    setError("");
    setRunning(true);
    try {
      for await (const r of api.environments.buildEnvironment({ environment, version }, { signal: controller.signal, timeoutMs: 0 })) {
        if (r.progress) setProgress((p) => [...p, r.progress!]);
      }
    } catch (e) {
      if (!isAbort(e)) setError(describeError(e));
    } finally {
      setRunning(false);
    }
  };
  const last = progress[progress.length - 1];
  return (
    <div className="build">
      <button type="button" onClick={build} disabled={running}>{running ? "Building…" : `Build v${version}`}</button>
      {last ? (
        <>
          <label>
            Build progress
            <progress max={100} value={last.percent} />
          </label>
          <ol className="build-log" aria-label="Build steps">
            {progress.map((p, i) => (
              <li key={i} className={p.error ? "error" : undefined}>
                {p.agentId ? `${p.agentId}: ` : ""}{(BuildState[p.state] ?? "").toLowerCase()} {p.phase} {p.percent}%{p.message ? ` ${p.message}` : ""}{p.error ? ` ${p.error}` : ""}
              </li>
            ))}
          </ol>
        </>
      ) : null}
      {error ? <p role="alert" className="error">{error}</p> : null}
    </div>
  );
}
