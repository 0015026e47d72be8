// A session's transcript as the console shows it, folded from its journal events (each seq once,
// in order) and the live deltas of messages still being written. Pure data: the session screen
// renders it, the watch feeds it.
import type { SessionEvent } from "./gen/astrabox/sessionkernel/v1/events_pb";
import { SessionDeltaKind, type SessionDelta } from "./gen/astrabox/sessionkernel/v1/session_kernel_service_pb";
import { InteractionKind, type Interaction, type Usage } from "./gen/astrabox/sessionkernel/v1/session_pb";
import { parseEngineMessage } from "./engineMessages";

export type Item =
  | { key: string; kind: "user"; seq: bigint; text: string; permissionMode: string }
  | { key: string; kind: "text"; seq: bigint; text: string }
  | { key: string; kind: "thinking"; seq: bigint; text: string }
  | {
      key: string;
      kind: "tool";
      seq: bigint;
      id: string;
      name: string;
      input: Record<string, unknown>;
      result: { content: string; isError: boolean } | null;
    }
  | { key: string; kind: "turn_end"; seq: bigint; outcome: "completed" | "failed" | "interrupted"; detail: string; usage: Usage | undefined; durationMs: bigint }
  | { key: string; kind: "notice"; seq: bigint; text: string; tone: "info" | "warn" };

/** A block of a message being written, shown until its complete message arrives. */
export interface LiveBlock {
  key: string;
  messageId: string;
  kind: SessionDeltaKind;
  text: string;
}

export type Applied = "applied" | "duplicate" | "gap";

export class Transcript {
  lastSeq = 0n;
  items: Item[] = [];
  live = new Map<string, LiveBlock>();
  pending: Interaction | undefined = undefined;
  private tools = new Map<string, number>();

  /** Folds in the event after the last one; a seq seen already is ignored, one past a gap refused. */
  apply(event: SessionEvent): Applied {
    if (event.seq <= this.lastSeq) return "duplicate";
    if (event.seq !== this.lastSeq + 1n) return "gap";
    this.lastSeq = event.seq;
    this.fold(event);
    return "applied";
  }

  /** Adds a piece of a block being written (deltas only follow the events before them). */
  applyDelta(delta: SessionDelta): void {
    if (!delta.text) return;
    const key = `${delta.messageId}:${delta.index}`;
    const block = this.live.get(key);
    if (block) block.text += delta.text;
    else this.live.set(key, { key, messageId: delta.messageId, kind: delta.kind, text: delta.text });
  }

  private push(item: Item): void {
    this.items.push(item);
  }

  private fold(event: SessionEvent): void {
    const seq = event.seq;
    const p = event.payload;
    const key = String(seq);
    switch (p.case) {
      case "userMessageAccepted":
        this.push({ key, kind: "user", seq, text: p.value.text, permissionMode: p.value.permissionMode });
        return;
      case "engineMessage": {
        this.engineMessage(seq, p.value.typeName, p.value.payloadJson);
        return;
      }
      case "turnCompleted":
        this.endTurn();
        this.push({
          key,
          kind: "turn_end",
          seq,
          outcome: p.value.isError ? "failed" : "completed",
          detail: p.value.isError ? p.value.subtype || "error" : "",
          usage: p.value.usage,
          durationMs: p.value.durationMs,
        });
        return;
      case "turnFailed":
        this.endTurn();
        this.push({ key, kind: "turn_end", seq, outcome: "failed", detail: p.value.reason, usage: undefined, durationMs: 0n });
        return;
      case "turnInterrupted":
        this.endTurn();
        this.push({ key, kind: "turn_end", seq, outcome: "interrupted", detail: p.value.reason, usage: p.value.usage, durationMs: 0n });
        return;
      case "interactionRequested": {
        const interaction = p.value.interaction;
        this.pending = interaction;
        const what =
          interaction?.kind === InteractionKind.QUESTION
            ? "asks a question"
            : interaction?.kind === InteractionKind.CUSTOM_TOOL
              ? `calls the custom tool ${interaction.toolName}`
              : `asks to use ${interaction?.toolName ?? "a tool"}`;
        this.push({ key, kind: "notice", seq, text: `The agent ${what}.`, tone: "info" });
        return;
      }
      case "interactionAnswered": {
        if (this.pending?.interactionId === p.value.interactionId) this.pending = undefined;
        const answers = Object.entries(p.value.answers).map(([q, a]) => `${q} → ${a}`);
        const text =
          p.value.decision === "answers"
            ? `Answered: ${answers.join("; ")}`
            : p.value.decision === "deny"
              ? `Denied${p.value.message ? `: ${p.value.message}` : ""}`
              : p.value.decision === "allow"
                ? "Allowed"
                : `Answered (${p.value.decision})`;
        this.push({ key, kind: "notice", seq, text, tone: "info" });
        return;
      }
      case "interactionClosed":
        if (this.pending?.interactionId === p.value.interactionId) this.pending = undefined;
        this.push({ key, kind: "notice", seq, text: `Question closed: ${p.value.reason}`, tone: "warn" });
        return;
      case "toolCallSettled":
        this.toolResult(p.value.toolUseId, p.value.reason, true);
        return;
      case "toolGranted": {
        const grant = p.value.grant;
        const scope = grant?.inputPattern ? ` matching ${grant.inputPattern}` : "";
        this.push({ key, kind: "notice", seq, text: `Granted ${grant?.toolName ?? "a tool"}${scope} for later calls.`, tone: "info" });
        return;
      }
      case "runtimeReady":
        this.push({ key, kind: "notice", seq, text: `Sandbox ready (${p.value.driver}, ${p.value.workspace}).`, tone: "info" });
        return;
      case "runtimeFailed":
        this.push({ key, kind: "notice", seq, text: `The runtime could not start: ${p.value.reason}`, tone: "warn" });
        return;
      case "runtimeLost":
        this.push({ key, kind: "notice", seq, text: `The runtime went away: ${p.value.reason}`, tone: "warn" });
        return;
      case "runtimeStopped":
        this.push({ key, kind: "notice", seq, text: `Runtime stopped: ${p.value.reason}`, tone: "info" });
        return;
      case "interruptRequested":
        this.push({ key, kind: "notice", seq, text: "Interrupt requested.", tone: "info" });
        return;
      case "permissionModeChanged":
        this.push({ key, kind: "notice", seq, text: `Permission mode: ${p.value.permissionMode}.`, tone: "info" });
        return;
      case "sessionArchived":
        this.push({ key, kind: "notice", seq, text: "Session archived.", tone: "info" });
        return;
      case "mcpServerUnavailable":
        this.push({ key, kind: "notice", seq, text: `MCP server ${p.value.server} unavailable: ${p.value.reason}`, tone: "warn" });
        return;
      case "networkRequestRefused":
        this.push({ key, kind: "notice", seq, text: `Network request to ${p.value.host}:${p.value.port} refused: ${p.value.reason}`, tone: "warn" });
        return;
      default:
        return;
    }
  }

  private engineMessage(seq: bigint, typeName: string, payloadJson: string): void {
    const view = parseEngineMessage(typeName, payloadJson);
    if (view.kind === "assistant") {
      for (const k of [...this.live.keys()]) if (this.live.get(k)?.messageId === view.messageId) this.live.delete(k);
      view.content.forEach((block, i) => {
        const key = `${seq}:${i}`;
        if (block.type === "text" && block.text) this.push({ key, kind: "text", seq, text: block.text });
        else if (block.type === "thinking" && block.thinking) this.push({ key, kind: "thinking", seq, text: block.thinking });
        else if (block.type === "tool_use") {
          this.tools.set(block.id, this.items.length);
          this.push({ key, kind: "tool", seq, id: block.id, name: block.name, input: block.input, result: null });
        }
      });
      if (view.error) this.push({ key: `${seq}:error`, kind: "notice", seq, text: `Model error: ${view.error}`, tone: "warn" });
    } else if (view.kind === "user") {
      for (const block of view.content) {
        if (block.type === "tool_result") this.toolResult(block.toolUseId, block.content, block.isError);
      }
    } else if (view.kind === "task" && view.subtype === "task_notification") {
      this.push({ key: String(seq), kind: "notice", seq, text: `Background task ${view.status ?? "ended"}: ${view.summary || view.description}`, tone: "info" });
    }
  }

  private toolResult(toolUseId: string, content: string, isError: boolean): void {
    const index = this.tools.get(toolUseId);
    if (index === undefined) return;
    const item = this.items[index];
    if (item.kind !== "tool" || item.result) return;
    this.items[index] = { ...item, result: { content, isError } };
  }

  private endTurn(): void {
    this.live.clear();
    this.pending = undefined;
  }
}

export function totalTokens(usage: Usage | undefined): bigint {
  if (!usage) return 0n;
  return usage.inputTokens + usage.outputTokens + usage.cacheCreationInputTokens + usage.cacheReadInputTokens;
}
