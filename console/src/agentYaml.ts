// Agent files in the browser: the YAML `astrabox agents apply` reads, read the same way
// (clients/python/astrabox/agent_files.py) into AgentSpecs, and a spec written back as that YAML
// (`agents show`), which is what the versions' diff compares.
import { create } from "@bufbuild/protobuf";
import { base64Decode, base64Encode } from "@bufbuild/protobuf/wire";
import { DurationSchema, type Duration } from "@bufbuild/protobuf/wkt";
import { isMap, isScalar, isSeq, LineCounter, parseAllDocuments, stringify, type Node } from "yaml";
import {
  AgentSpecSchema,
  ToolPolicy,
  type AgentSpec,
  type McpServer,
  type Skill,
} from "./gen/astrabox/agents/v1/agent_pb";

export class AgentFileError extends Error {}

export interface AgentFile {
  name: string;
  spec: AgentSpec;
  line: number;
}

const AGENT_NAME = /^[a-z][a-z0-9-]{0,63}$/;
const MCP_NAME = /^[a-z][a-z0-9_-]{0,63}$/;
const CUSTOM_TOOL_NAME = /^[a-z][a-z0-9_]{0,63}$/;
const POLICIES: Record<string, ToolPolicy> = { allow: ToolPolicy.ALLOW, ask: ToolPolicy.ASK, deny: ToolPolicy.DENY };
const TOP = ["name", "description", "engine", "model", "permission_mode", "system_prompt", "tools", "mcp_servers", "skills", "limits", "custom_tools"];

/** The agents of an agent file's text, one per YAML document; an AgentFileError names the line and key. */
export function parseAgentFile(text: string): AgentFile[] {
  const lines = new LineCounter();
  const documents = parseAllDocuments(text, { lineCounter: lines, uniqueKeys: true, prettyErrors: false });
  if (!Array.isArray(documents)) throw new AgentFileError("not a YAML file");
  const agents: AgentFile[] = [];
  for (const document of documents) {
    if (document.errors.length) {
      const error = document.errors[0];
      const at = lines.linePos(error.pos[0]);
      throw new AgentFileError(`line ${at.line}: ${error.message.split("\n")[0]}`);
    }
    if (document.contents === null) continue;
    agents.push(new Reader(lines).agent(document.contents as Node));
  }
  if (!agents.length) throw new AgentFileError("the file holds no agent");
  const names = agents.map((a) => a.name);
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice) throw new AgentFileError(`the agent ${twice} is defined twice`);
  return agents;
}

type Fields = Map<string, Node>;

class Reader {
  constructor(private readonly lines: LineCounter) {}

  private line(node: Node | null | undefined): number {
    return node?.range ? this.lines.linePos(node.range[0]).line : 0;
  }

  private fail(node: Node | null | undefined, what: string, problem: string): never {
    const line = this.line(node);
    throw new AgentFileError(`${line ? `line ${line}: ` : ""}${what ? `${what}: ` : ""}${problem}`);
  }

  private mapping(node: Node, what: string, keys: string[] | null, required: string[] = []): Fields {
    if (!isMap(node)) this.fail(node, what, "must be a mapping");
    const fields: Fields = new Map();
    for (const pair of node.items) {
      const keyNode = pair.key as Node;
      const key = isScalar(keyNode) ? String(keyNode.value) : "";
      if (keys && !keys.includes(key)) {
        this.fail(keyNode, what, `unknown key ${JSON.stringify(key)}; valid: ${keys.join(", ")}`);
      }
      const value = pair.value as Node | null;
      // A key whose value is empty is as good as absent.
      if (value === null || (isScalar(value) && value.value === null)) continue;
      fields.set(key, value);
    }
    for (const key of required) if (!fields.has(key)) this.fail(node, what, `${key} is required`);
    return fields;
  }

  private text(node: Node, what: string, most = 0, empty = true): string {
    if (!isScalar(node) || typeof node.value !== "string") {
      if (isScalar(node) && (typeof node.value === "number" || typeof node.value === "boolean")) {
        this.fail(node, what, `must be text; quote ${String(node.value)} to make it one`);
      }
      this.fail(node, what, "must be text");
    }
    const value = node.value as string;
    if (!empty && !value) this.fail(node, what, "must not be empty");
    if (most && new TextEncoder().encode(value).length > most) this.fail(node, what, `longer than ${most} bytes`);
    if (value.includes("\0")) this.fail(node, what, "holds a NUL character");
    return value;
  }

  private sequence(node: Node, what: string, most: number): Node[] {
    if (!isSeq(node)) this.fail(node, what, "must be a list");
    const items = node.items as Node[];
    if (items.length > most) this.fail(node, what, `${items.length} items, over the limit of ${most}`);
    return items;
  }

  private texts(node: Node, what: string, most: number): string[] {
    return this.sequence(node, what, most).map((item, i) => this.text(item, `${what}[${i}]`));
  }

  private number(node: Node, what: string): number {
    if (!isScalar(node) || typeof node.value !== "number" || !Number.isFinite(node.value) || node.value < 0) {
      this.fail(node, what, "must be a number, 0 or more");
    }
    return node.value as number;
  }

  private policy(node: Node, what: string): ToolPolicy {
    const name = this.text(node, what);
    if (!(name in POLICIES)) this.fail(node, what, `unknown policy ${JSON.stringify(name)}; valid: ${Object.keys(POLICIES).join(", ")}`);
    return POLICIES[name];
  }

  private unique(nodes: Node[], names: string[], what: string): void {
    names.forEach((name, i) => {
      if (names.indexOf(name) !== i) this.fail(nodes[i], what, `${JSON.stringify(name)} is named twice`);
    });
  }

  agent(node: Node): AgentFile {
    const f = this.mapping(node, "", TOP, ["name"]);
    const name = this.text(f.get("name")!, "name");
    if (!AGENT_NAME.test(name)) this.fail(f.get("name"), "name", `${JSON.stringify(name)} is not 1-64 characters of a-z, 0-9 and -, starting with a letter`);
    const spec = create(AgentSpecSchema);
    for (const [key, field] of [["engine", "engine"], ["model", "model"], ["permission_mode", "permissionMode"]] as const) {
      const value = f.get(key);
      if (value) spec[field] = this.text(value, key);
    }
    if (f.has("description")) spec.description = this.text(f.get("description")!, "description", 1024);
    const prompt = f.get("system_prompt");
    if (prompt) {
      const p = this.mapping(prompt, "system_prompt", ["append", "replace"]);
      if (p.size !== 1) this.fail(prompt, "system_prompt", "give exactly one of append or replace");
      const [[key, value]] = [...p.entries()];
      spec.systemPrompt = { $typeName: "astrabox.agents.v1.SystemPrompt", prompt: { case: key as "append" | "replace", value: this.text(value, `system_prompt.${key}`, 256 * 1024) } };
    }
    const tools = f.get("tools");
    if (tools) {
      const t = this.mapping(tools, "tools", ["enabled", "default", "rules"]);
      const spec_tools = create(AgentSpecSchema, { tools: {} }).tools!;
      if (t.has("enabled")) spec_tools.enabled = this.texts(t.get("enabled")!, "tools.enabled", 128);
      if (t.has("default")) spec_tools.defaultPolicy = this.policy(t.get("default")!, "tools.default");
      if (t.has("rules")) {
        this.sequence(t.get("rules")!, "tools.rules", 256).forEach((ruleNode, i) => {
          const what = `tools.rules[${i}]`;
          const r = this.mapping(ruleNode, what, ["tool", "policy"], ["tool", "policy"]);
          spec_tools.rules.push({
            $typeName: "astrabox.agents.v1.ToolRule",
            tool: this.text(r.get("tool")!, `${what}.tool`, 256, false),
            policy: this.policy(r.get("policy")!, `${what}.policy`),
          });
        });
      }
      spec.tools = spec_tools;
    }
    const servers = f.get("mcp_servers");
    if (servers) {
      const nodes = this.sequence(servers, "mcp_servers", 16);
      spec.mcpServers = nodes.map((n, i) => this.mcpServer(n, `mcp_servers[${i}]`));
      this.unique(nodes, spec.mcpServers.map((s) => s.name), "mcp_servers");
    }
    const skills = f.get("skills");
    if (skills) {
      const nodes = this.sequence(skills, "skills", 32);
      spec.skills = nodes.map((n, i) => this.skill(n, `skills[${i}]`));
      this.unique(nodes, spec.skills.map((s) => s.name), "skills");
    }
    const limits = f.get("limits");
    if (limits) {
      const l = this.mapping(limits, "limits", ["max_turns", "max_cost_usd_per_turn", "max_cost_usd_per_session", "turn_timeout"]);
      const out = create(AgentSpecSchema, { limits: {} }).limits!;
      if (l.has("max_turns")) {
        const n = this.number(l.get("max_turns")!, "limits.max_turns");
        if (!Number.isInteger(n) || n > 2 ** 31 - 1) this.fail(l.get("max_turns"), "limits.max_turns", "must be a whole number");
        out.maxTurns = n;
      }
      if (l.has("max_cost_usd_per_turn")) out.maxCostUsdPerTurn = this.number(l.get("max_cost_usd_per_turn")!, "limits.max_cost_usd_per_turn");
      if (l.has("max_cost_usd_per_session")) out.maxCostUsdPerSession = this.number(l.get("max_cost_usd_per_session")!, "limits.max_cost_usd_per_session");
      if (l.has("turn_timeout")) out.turnTimeout = this.duration(l.get("turn_timeout")!, "limits.turn_timeout");
      spec.limits = out;
    }
    const custom = f.get("custom_tools");
    if (custom) {
      const nodes = this.sequence(custom, "custom_tools", 32);
      spec.customTools = nodes.map((n, i) => {
        const what = `custom_tools[${i}]`;
        const c = this.mapping(n, what, ["name", "description", "input_schema"], ["name", "input_schema"]);
        const toolName = this.text(c.get("name")!, `${what}.name`);
        if (!CUSTOM_TOOL_NAME.test(toolName)) this.fail(c.get("name"), `${what}.name`, `${JSON.stringify(toolName)} is not 1-64 characters of a-z, 0-9 and _, starting with a letter`);
        const schema = c.get("input_schema")!;
        if (!isMap(schema)) this.fail(schema, `${what}.input_schema`, "must be a mapping: the JSON Schema of the tool's input");
        return {
          $typeName: "astrabox.agents.v1.CustomTool" as const,
          name: toolName,
          description: c.has("description") ? this.text(c.get("description")!, `${what}.description`, 4096) : "",
          inputSchemaJson: JSON.stringify(schema.toJSON()),
        };
      });
      this.unique(nodes, spec.customTools.map((t) => t.name), "custom_tools");
    }
    return { name, spec, line: this.line(node) };
  }

  private mcpServer(node: Node, what: string): McpServer {
    const f = this.mapping(node, what, ["name", "stdio", "http", "enabled_tools"], ["name"]);
    const name = this.text(f.get("name")!, `${what}.name`);
    if (!MCP_NAME.test(name)) this.fail(f.get("name"), `${what}.name`, `${JSON.stringify(name)} is not 1-64 characters of a-z, 0-9, _ and -, starting with a letter`);
    if (f.has("stdio") === f.has("http")) this.fail(node, what, "must have one of 'stdio' (a program in the sandbox) or 'http' (a URL)");
    const server: McpServer = { $typeName: "astrabox.agents.v1.McpServer", name, transport: { case: undefined }, enabledTools: [] };
    if (f.has("http")) {
      const h = this.mapping(f.get("http")!, `${what}.http`, ["url", "credential", "header"], ["url"]);
      server.transport = {
        case: "http",
        value: {
          $typeName: "astrabox.agents.v1.HttpMcpServer",
          url: this.text(h.get("url")!, `${what}.http.url`, 2048, false),
          credential: h.has("credential") ? this.text(h.get("credential")!, `${what}.http.credential`) : "",
          header: h.has("header") ? this.text(h.get("header")!, `${what}.http.header`) : "",
        },
      };
    } else {
      const s = this.mapping(f.get("stdio")!, `${what}.stdio`, ["command", "args", "env"], ["command"]);
      const env: Record<string, string> = {};
      if (s.has("env")) {
        const e = this.mapping(s.get("env")!, `${what}.stdio.env`, null);
        if (e.size > 64) this.fail(s.get("env"), `${what}.stdio.env`, `${e.size} variables, over the limit of 64`);
        for (const [k, v] of e) env[k] = this.text(v, `${what}.stdio.env.${k}`);
      }
      server.transport = {
        case: "stdio",
        value: {
          $typeName: "astrabox.agents.v1.StdioMcpServer",
          command: this.text(s.get("command")!, `${what}.stdio.command`, 4096, false),
          args: s.has("args") ? this.texts(s.get("args")!, `${what}.stdio.args`, 64) : [],
          env,
        },
      };
    }
    if (f.has("enabled_tools")) server.enabledTools = this.texts(f.get("enabled_tools")!, `${what}.enabled_tools`, 128);
    return server;
  }

  private skill(node: Node, what: string): Skill {
    const f = this.mapping(node, what, ["name", "path", "files"], ["name"]);
    const name = this.text(f.get("name")!, `${what}.name`);
    if (!AGENT_NAME.test(name)) this.fail(f.get("name"), `${what}.name`, `${JSON.stringify(name)} is not 1-64 characters of a-z, 0-9 and -, starting with a letter`);
    if (f.has("path")) this.fail(f.get("path"), `${what}.path`, "a browser cannot read a directory: list the skill's files inline (files:), or apply this file with `astrabox agents apply`");
    if (!f.has("files")) this.fail(node, what, "give the skill's files (files:)");
    const nodes = this.sequence(f.get("files")!, `${what}.files`, 64);
    const files = nodes.map((n, i) => {
      const w = `${what}.files[${i}]`;
      const file = this.mapping(n, w, ["path", "content", "content_base64"], ["path"]);
      const path = this.text(file.get("path")!, `${w}.path`, 256);
      if (!path || path.startsWith("/") || path.split("/").some((p) => p === "" || p === "." || p === "..")) {
        this.fail(file.get("path"), `${w}.path`, `${JSON.stringify(path)} is not a relative path inside the skill (no '..', '.', empty part or leading '/')`);
      }
      if (file.has("content") === file.has("content_base64")) this.fail(n, w, "give exactly one of content or content_base64");
      let content: Uint8Array;
      if (file.has("content")) content = new TextEncoder().encode(this.text(file.get("content")!, `${w}.content`));
      else {
        try {
          content = base64Decode(this.text(file.get("content_base64")!, `${w}.content_base64`));
        } catch {
          this.fail(file.get("content_base64"), `${w}.content_base64`, "not base64");
        }
      }
      return { $typeName: "astrabox.agents.v1.SkillFile" as const, path, content };
    });
    this.unique(nodes, files.map((x) => x.path), `${what}.files`);
    if (!files.some((x) => x.path === "SKILL.md")) this.fail(node, what, "a skill needs a SKILL.md");
    return { $typeName: "astrabox.agents.v1.Skill", name, files };
  }

  private duration(node: Node, what: string): Duration {
    if (!isScalar(node)) this.fail(node, what, "must be a duration such as 90s, 30m or 1h30m");
    const value = node.value;
    let seconds: number;
    if (typeof value === "number") {
      if (!Number.isFinite(value) || value < 0) this.fail(node, what, `${value} is not a duration of 0 seconds or more`);
      seconds = value;
    } else if (typeof value === "string") {
      const parts = [...value.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)];
      if (!parts.length || parts.map((p) => p[0]).join("") !== value) {
        this.fail(node, what, `${JSON.stringify(value)} is not a duration such as 90s, 30m or 1h30m (units h, m, s, ms)`);
      }
      const units: Record<string, number> = { h: 3600, m: 60, s: 1, ms: 0.001 };
      seconds = parts.reduce((sum, p) => sum + Number(p[1]) * units[p[2]], 0);
    } else this.fail(node, what, "must be a duration such as 90s, 30m or 1h30m");
    const whole = Math.floor(seconds);
    return create(DurationSchema, { seconds: BigInt(whole), nanos: Math.round((seconds - whole) * 1e9) });
  }
}

/** The agent file of `name` defined by `spec`, as `astrabox agents show` writes it. */
export function dumpAgentFile(name: string, spec: AgentSpec): string {
  const doc: Record<string, unknown> = { name };
  if (spec.description) doc.description = spec.description;
  if (spec.engine) doc.engine = spec.engine;
  if (spec.model) doc.model = spec.model;
  if (spec.permissionMode) doc.permission_mode = spec.permissionMode;
  if (spec.systemPrompt) {
    const p = spec.systemPrompt.prompt;
    doc.system_prompt = p.case ? { [p.case]: p.value } : {};
  }
  if (spec.tools) {
    const names = Object.fromEntries(Object.entries(POLICIES).map(([k, v]) => [v, k]));
    const t: Record<string, unknown> = {};
    if (spec.tools.enabled.length) t.enabled = [...spec.tools.enabled];
    if (spec.tools.defaultPolicy) t.default = names[spec.tools.defaultPolicy];
    if (spec.tools.rules.length) t.rules = spec.tools.rules.map((r) => ({ tool: r.tool, policy: names[r.policy] }));
    doc.tools = t;
  }
  if (spec.mcpServers.length) {
    doc.mcp_servers = spec.mcpServers.map((s) => {
      const out: Record<string, unknown> = { name: s.name };
      if (s.transport.case === "http") {
        const h = s.transport.value;
        out.http = Object.fromEntries(Object.entries({ url: h.url, credential: h.credential, header: h.header }).filter(([, v]) => v));
      } else if (s.transport.case === "stdio") {
        const st = s.transport.value;
        const stdio: Record<string, unknown> = { command: st.command };
        if (st.args.length) stdio.args = [...st.args];
        if (Object.keys(st.env).length) stdio.env = Object.fromEntries(Object.entries(st.env).sort(([a], [b]) => (a < b ? -1 : 1)));
        out.stdio = stdio;
      }
      if (s.enabledTools.length) out.enabled_tools = [...s.enabledTools];
      return out;
    });
  }
  if (spec.skills.length) {
    doc.skills = spec.skills.map((s) => ({
      name: s.name,
      files: s.files.map((f) => {
        try {
          return { path: f.path, content: new TextDecoder("utf-8", { fatal: true }).decode(f.content) };
        } catch {
          return { path: f.path, content_base64: base64Encode(f.content) };
        }
      }),
    }));
  }
  if (spec.limits) {
    const l: Record<string, unknown> = {};
    if (spec.limits.maxTurns) l.max_turns = spec.limits.maxTurns;
    if (spec.limits.maxCostUsdPerTurn) l.max_cost_usd_per_turn = spec.limits.maxCostUsdPerTurn;
    if (spec.limits.maxCostUsdPerSession) l.max_cost_usd_per_session = spec.limits.maxCostUsdPerSession;
    if (spec.limits.turnTimeout) l.turn_timeout = formatDuration(spec.limits.turnTimeout);
    doc.limits = l;
  }
  if (spec.customTools.length) {
    doc.custom_tools = spec.customTools.map((t) => {
      const out: Record<string, unknown> = { name: t.name };
      if (t.description) out.description = t.description;
      try {
        out.input_schema = JSON.parse(t.inputSchemaJson || "{}");
      } catch {
        out.input_schema = t.inputSchemaJson;
      }
      return out;
    });
  }
  return stringify(doc, { lineWidth: 100 });
}

function formatDuration(d: Duration): string {
  let rest = Number(d.seconds) + d.nanos / 1e9;
  const hours = Math.floor(rest / 3600);
  rest -= hours * 3600;
  const minutes = Math.floor(rest / 60);
  rest -= minutes * 60;
  let text = (hours ? `${hours}h` : "") + (minutes ? `${minutes}m` : "");
  if (rest || !text) text += `${Number(rest.toFixed(9))}s`;
  return text;
}
