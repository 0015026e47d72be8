// How values read on screen.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { SessionState } from "./gen/astrabox/sessionkernel/v1/session_pb";
import type { Usage } from "./gen/astrabox/sessionkernel/v1/session_pb";

export function stateName(state: SessionState): string {
  return (SessionState[state] ?? "UNKNOWN").toLowerCase().replace(/_/g, " ");
}

export function when(ts: Timestamp | undefined): string {
  if (!ts) return "";
  const date = timestampDate(ts);
  return date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

export function cost(usd: number): string {
  return `$${usd.toFixed(usd && usd < 0.01 ? 4 : 2)}`;
}

export function tokens(usage: Usage | undefined): string {
  if (!usage) return "0 tokens";
  const total = usage.inputTokens + usage.outputTokens + usage.cacheCreationInputTokens + usage.cacheReadInputTokens;
  return `${total.toLocaleString()} tokens (${usage.inputTokens.toLocaleString()} in, ${usage.outputTokens.toLocaleString()} out)`;
}

export function bytes(n: bigint | number): string {
  const v = Number(n);
  if (v < 1024) return `${v} B`;
  if (v < 1024 * 1024) return `${(v / 1024).toFixed(1)} KiB`;
  return `${(v / 1024 / 1024).toFixed(1)} MiB`;
}

export function shortId(id: string): string {
  return id.length > 8 ? id.slice(0, 8) : id;
}

/** An href for text from an engine: only http(s), else none (the text shows, inert). */
export function safeHref(text: string): string | undefined {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : undefined;
  } catch {
    return undefined;
  }
}
