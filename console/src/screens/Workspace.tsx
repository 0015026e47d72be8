// A session's workspace: browse a directory, download a file (as itself) or a directory (a tar
// archive), and upload files into the directory shown.
import { useCallback, useEffect, useRef, useState, type FormEvent } from "react";
import { describeError, type Api } from "../api";
import type { WorkspaceEntry } from "../gen/astrabox/sessionkernel/v1/session_kernel_service_pb";
import { bytes, when } from "../format";
import { downloadArchive, firstFileOf, part, saveAs, tarFiles, uploadArchive } from "../workspaceFiles";

/** `version` changes when the files may have (a turn ended, the sandbox came or went): the listing is read again. */
export function Workspace({ api, sessionId, available, version }: { api: Api; sessionId: string; available: boolean; version: string }) {
  const [path, setPath] = useState("");
  const [entries, setEntries] = useState<WorkspaceEntry[] | undefined>();
  const [error, setError] = useState("");
  const [note, setNote] = useState("");
  const [busy, setBusy] = useState(false);
  const files = useRef<HTMLInputElement>(null);

  const load = useCallback(() => {
    setError("");
    if (!available) {
      setEntries(undefined);
      return;
    }
    api.sessions
      .listWorkspace({ sessionId, path })
      .then((r) => setEntries(r.entries))
      .catch((e) => {
        setEntries(undefined);
        setError(describeError(e));
      });
  }, [api, sessionId, path, available]);
  useEffect(load, [load, version]);

  const join = (name: string) => (path ? `${path}/${name}` : name);
  const download = async (entry: WorkspaceEntry) => {
    setBusy(true);
    setNote("");
    try {
      const target = join(entry.name);
      const archive = await downloadArchive(api, sessionId, target);
      const file = entry.type === "file" ? firstFileOf(archive) : null;
      if (file) saveAs(part(file.data), entry.name);
      else saveAs(part(archive), `${entry.name}.tar`, "application/x-tar");
      setNote(`Downloaded /workspace/${target}`);
    } catch (e) {
      setError(describeError(e));
    } finally {
      setBusy(false);
    }
  };
  const upload = async (e: FormEvent) => {
    e.preventDefault();
    const picked = [...(files.current?.files ?? [])];
    if (!picked.length) return;
    setBusy(true);
    setNote("");
    setError("");
    try {
      const archive = await tarFiles(picked.map((f) => ({ name: f.name, file: f, mtime: f.lastModified })));
      const result = await uploadArchive(api, sessionId, path, archive);
      setNote(`Uploaded ${result.entries} entries, ${bytes(result.bytes)}`);
      if (files.current) files.current.value = "";
      load();
    } catch (err) {
      setError(describeError(err));
    } finally {
      setBusy(false);
    }
  };

  const parts = path ? path.split("/") : [];
  return (
    <section aria-labelledby="workspace-title" className="workspace panel">
      <div className="section-head">
        <h2 id="workspace-title">Workspace</h2>
        <button type="button" onClick={load}>Refresh</button>
      </div>
      <nav aria-label="Workspace path" className="crumbs">
        <button type="button" className="linkish" onClick={() => setPath("")}>/workspace</button>
        {parts.map((part, i) => (
          <span key={i}>
            /<button type="button" className="linkish" onClick={() => setPath(parts.slice(0, i + 1).join("/"))}>{part}</button>
          </span>
        ))}
      </nav>
      {!available ? <p className="hint">No sandbox right now: the files show once the session runs (a message brings it back).</p> : null}
      {error ? <p role="alert" className="error">{error}</p> : null}
      {note ? <p role="status" className="note">{note}</p> : null}
      {entries ? (
        <table className="list files">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Size</th>
              <th scope="col">Modified</th>
              <th scope="col"><span className="visually-hidden">Actions</span></th>
            </tr>
          </thead>
          <tbody>
            {entries.map((entry) => (
              <tr key={entry.name}>
                <td>
                  {entry.type === "directory" ? (
                    <button type="button" className="linkish" onClick={() => setPath(join(entry.name))}>{entry.name}/</button>
                  ) : (
                    <span>{entry.name}{entry.type === "symlink" ? " →" : ""}</span>
                  )}
                </td>
                <td>{entry.type === "file" ? bytes(entry.size) : ""}</td>
                <td>{when(entry.modifyTime)}</td>
                <td>
                  <button type="button" disabled={busy} onClick={() => download(entry)} aria-label={`Download ${entry.name}`}>Download</button>
                </td>
              </tr>
            ))}
            {!entries.length ? <tr><td colSpan={4} className="empty">Empty directory.</td></tr> : null}
          </tbody>
        </table>
      ) : null}
      <form onSubmit={upload} className="stack upload">
        <label>
          Upload files to /workspace{path ? `/${path}` : ""}
          <input ref={files} type="file" multiple />
        </label>
        <button type="submit" disabled={busy || !available}>Upload</button>
      </form>
    </section>
  );
}
