// Typed views of the engine's messages, read from EngineMessage.payload_json as the Python SDK
// reads them (clients/python/astrabox/messages.py). Reading never throws: a field of an
// unexpected type reads as empty, and a message that cannot be read becomes "other". Every
// string here is the engine's, so hostile: the views render it as text, never as markup.

export type Block =
  | { type: "text"; text: string }
  | { type: "thinking"; thinking: string }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> }
  | { type: "tool_result"; toolUseId: string; content: string; isError: boolean }
  | { type: "other"; typeName: string };

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cacheReadInputTokens: number;
  cacheCreationInputTokens: number;
}

export type EngineView =
  | { kind: "assistant"; messageId: string; content: Block[]; model: string; error: string | null; parentToolUseId: string | null }
  | { kind: "user"; content: Block[]; parentToolUseId: string | null }
  | { kind: "result"; subtype: string; isError: boolean; result: string; totalCostUsd: number | null; usage: Usage | null; durationMs: number }
  | { kind: "init"; model: string; tools: string[]; cwd: string }
  | { kind: "task"; typeName: string; subtype: string; taskId: string; status: string | null; description: string; summary: string }
  | { kind: "system"; typeName: string; subtype: string }
  | { kind: "other"; typeName: string };

const TASK_TYPES = new Set(["TaskStartedMessage", "TaskProgressMessage", "TaskUpdatedMessage", "TaskNotificationMessage"]);

type Json = Record<string, unknown>;

const str = (v: unknown): string => (typeof v === "string" ? v : "");
const optStr = (v: unknown): string | null => (typeof v === "string" ? v : null);
const int = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

export function parseEngineMessage(typeName: string, payloadJson: string): EngineView {
  let payload: unknown;
  try {
    payload = JSON.parse(payloadJson || "{}");
  } catch {
    return { kind: "other", typeName };
  }
  if (!isObject(payload)) return { kind: "other", typeName };
  try {
    return parse(typeName, payload);
  } catch {
    return { kind: "other", typeName };
  }
}

function parse(typeName: string, p: Json): EngineView {
  if (typeName === "AssistantMessage") {
    return {
      kind: "assistant",
      messageId: str(p.message_id),
      content: blocks(p.content),
      model: str(p.model),
      error: optStr(p.error),
      parentToolUseId: optStr(p.parent_tool_use_id),
    };
  }
  if (typeName === "UserMessage") {
    return { kind: "user", content: blocks(p.content), parentToolUseId: optStr(p.parent_tool_use_id) };
  }
  if (typeName === "ResultMessage") {
    return {
      kind: "result",
      subtype: str(p.subtype),
      isError: p.is_error === true,
      result: str(p.result),
      totalCostUsd: typeof p.total_cost_usd === "number" ? p.total_cost_usd : null,
      usage: usage(p.usage),
      durationMs: int(p.duration_ms),
    };
  }
  if (TASK_TYPES.has(typeName)) {
    return {
      kind: "task",
      typeName,
      subtype: str(p.subtype),
      taskId: str(p.task_id),
      status: optStr(p.status),
      description: str(p.description),
      summary: str(p.summary),
    };
  }
  const data = p.data;
  if (isObject(data) && typeof p.subtype === "string") {
    if (p.subtype === "init") {
      return { kind: "init", model: str(data.model), tools: list(data.tools).map(str), cwd: str(data.cwd) };
    }
    return { kind: "system", typeName, subtype: p.subtype };
  }
  return { kind: "other", typeName };
}

function blocks(content: unknown): Block[] {
  if (typeof content === "string") return [{ type: "text", text: content }];
  return list(content).filter(isObject).map(block);
}

function block(item: Json): Block {
  const kind = str(item.type_name);
  if (kind === "TextBlock") return { type: "text", text: str(item.text) };
  if (kind === "ThinkingBlock") return { type: "thinking", thinking: str(item.thinking) };
  if (kind === "ToolUseBlock") {
    return { type: "tool_use", id: str(item.id), name: str(item.name), input: isObject(item.input) ? item.input : {} };
  }
  if (kind === "ToolResultBlock") {
    return { type: "tool_result", toolUseId: str(item.tool_use_id), content: resultText(item.content), isError: item.is_error === true };
  }
  return { type: "other", typeName: kind };
}

function resultText(content: unknown): string {
  if (typeof content === "string") return content;
  return list(content)
    .filter(isObject)
    .filter((part) => "text" in part)
    .map((part) => str(part.text))
    .join("\n");
}

function usage(v: unknown): Usage | null {
  if (!isObject(v)) return null;
  return {
    inputTokens: int(v.input_tokens),
    outputTokens: int(v.output_tokens),
    cacheReadInputTokens: int(v.cache_read_input_tokens),
    cacheCreationInputTokens: int(v.cache_creation_input_tokens),
  };
}

/** A tool call's input in one line: Bash's command, a file tool's path, else compact JSON. */
export function toolSummary(name: string, input: Record<string, unknown>): string {
  for (const key of ["command", "file_path", "path", "url", "pattern"]) {
    if (typeof input[key] === "string") return input[key] as string;
  }
  try {
    return JSON.stringify(input);
  } catch {
    return name;
  }
}
