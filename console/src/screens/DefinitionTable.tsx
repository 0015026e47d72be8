// The list of a project's definitions (agents, environments): name, newest version, last change,
// archived or not; the selected one marked.
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { when } from "../format";

export interface Definition {
  id: string;
  name: string;
  latestVersion: number;
  updateTime?: Timestamp;
  archived: boolean;
}

export function DefinitionTable({
  rows,
  selected,
  link,
  empty,
}: {
  rows: Definition[];
  selected?: string;
  link: (name: string) => string;
  empty: string;
}) {
  return (
    <table className="list">
      <thead>
        <tr>
          <th scope="col">Name</th>
          <th scope="col">Newest version</th>
          <th scope="col">Updated</th>
          <th scope="col">Status</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((row) => (
          <tr key={row.id} aria-selected={selected === row.name}>
            <td><a href={link(row.name)}>{row.name}</a></td>
            <td>v{row.latestVersion}</td>
            <td>{when(row.updateTime)}</td>
            <td>{row.archived ? "archived" : "active"}</td>
          </tr>
        ))}
        {!rows.length ? <tr><td colSpan={4} className="empty">{empty}</td></tr> : null}
      </tbody>
    </table>
  );
}
