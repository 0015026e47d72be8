// A session's events, stored then live, resumed after the last seq seen whenever the stream drops:
// the transcript gets every seq once and in order (it ignores a seq it has, and a gap makes the
// watch reopen after its last seq), and the deltas written since each (re)open.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Api } from "./api";
import { describeError, errorInfo, isAbort } from "./api";
import type { Transcript } from "./transcript";

export type WatchStatus = { state: "connecting" | "live" | "retrying"; detail: string; reconnects: number };

// Codes after which the watch reopens (the server, its database or the connection went away);
// a reset on the way reads as INTERNAL/UNKNOWN without the service's ErrorInfo.
const RESUMABLE = new Set([Code.Unavailable, Code.Aborted, Code.Canceled, Code.DeadlineExceeded]);

function resumable(error: unknown): boolean {
  if (!(error instanceof ConnectError)) return true; // a network error: fetch failed, stream cut
  if (RESUMABLE.has(error.code)) return true;
  return (error.code === Code.Internal || error.code === Code.Unknown) && !errorInfo(error)?.reason;
}

export async function watchSession(
  api: Api,
  sessionId: string,
  transcript: Transcript,
  onChange: (sawEvent: boolean) => void,
  onStatus: (status: WatchStatus) => void,
  signal: AbortSignal,
): Promise<void> {
  let failures = 0;
  let reconnects = 0;
  while (!signal.aborted) {
    onStatus({ state: failures ? "retrying" : "connecting", detail: "", reconnects });
    try {
      // The transcript reads payload_json itself (engineMessages.ts): no typed view on the wire.
      const stream = api.sessions.watchSessionEvents(
        { sessionId, afterSeq: transcript.lastSeq, includeDeltas: true, maxEventsPerResponse: 200, omitContent: true },
        { signal, timeoutMs: 0 },
      );
      let first = true;
      let gap = false;
      for await (const response of stream) {
        if (first) {
          onStatus({ state: "live", detail: "", reconnects });
          first = false;
        }
        if (response.delta) {
          transcript.applyDelta(response.delta);
          onChange(false);
          continue;
        }
        const events = response.events.length ? response.events : response.event ? [response.event] : [];
        let saw = false;
        for (const event of events) {
          const applied = transcript.apply(event);
          if (applied === "gap") {
            gap = true;
            break;
          }
          if (applied === "applied") {
            saw = true;
            failures = 0;
          }
        }
        if (saw) onChange(true);
        if (gap) break;
      }
      // The stream ended (or had a gap): open it again after the last seq.
    } catch (error) {
      if (signal.aborted || (isAbort(error) && signal.aborted)) return;
      if (!resumable(error)) {
        onStatus({ state: "retrying", detail: describeError(error), reconnects });
        throw error;
      }
      onStatus({ state: "retrying", detail: describeError(error), reconnects });
    }
    if (signal.aborted) return;
    const delay = Math.min(10_000, 250 * 2 ** Math.min(failures, 6)) * (0.5 + Math.random() / 2);
    failures += 1;
    reconnects += 1;
    await sleep(delay, signal);
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
