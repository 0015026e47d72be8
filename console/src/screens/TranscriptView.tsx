// The transcript as text: every string from the engine is rendered by React as text (escaped),
// and only http(s) URLs become links, opened with rel="noopener noreferrer".
import { useEffect, useRef, type ReactNode } from "react";
import { SessionDeltaKind } from "../gen/astrabox/sessionkernel/v1/session_kernel_service_pb";
import { toolSummary } from "../engineMessages";
import { cost, safeHref } from "../format";
import { totalTokens, type Item, type Transcript } from "../transcript";

const URL_PATTERN = /https?:\/\/[^\s<>"'`]+/g;

/** Text with its http(s) URLs as links; everything else stays text. */
export function Linkified({ text }: { text: string }) {
  const parts: ReactNode[] = [];
  let at = 0;
  for (const match of text.matchAll(URL_PATTERN)) {
    const start = match.index ?? 0;
    const url = match[0].replace(/[).,;:!?]+$/, "");
    const link = safeHref(url);
    if (!link) continue;
    if (start > at) parts.push(text.slice(at, start));
    parts.push(
      <a key={start} href={link} target="_blank" rel="noopener noreferrer">
        {url}
      </a>,
    );
    at = start + url.length;
  }
  if (at < text.length) parts.push(text.slice(at));
  return <>{parts}</>;
}

function ItemView({ item }: { item: Item }) {
  switch (item.kind) {
    case "user":
      return (
        <div className="msg msg-user" data-seq={String(item.seq)}>
          <span className="who">You</span>
          <div className="text">{item.text}</div>
        </div>
      );
    case "text":
      return (
        <div className="msg msg-assistant" data-seq={String(item.seq)}>
          <span className="who">Agent</span>
          <div className="text"><Linkified text={item.text} /></div>
        </div>
      );
    case "thinking":
      return (
        <details className="thinking" data-seq={String(item.seq)}>
          <summary>Thinking</summary>
          <div className="text">{item.text}</div>
        </details>
      );
    case "tool": {
      const state = item.result ? (item.result.isError ? "error" : "done") : "running";
      return (
        <details className={`tool tool-${state}`} data-seq={String(item.seq)} data-testid="tool-call">
          <summary>
            <span className="tool-name">{item.name}</span> <code className="tool-input">{toolSummary(item.name, item.input)}</code>{" "}
            <span className="tool-state">{state === "running" ? "running…" : state === "error" ? "failed" : "done"}</span>
          </summary>
          <div className="tool-body">
            <h4>Input</h4>
            <pre>{JSON.stringify(item.input, null, 2)}</pre>
            {item.result ? (
              <>
                <h4>{item.result.isError ? "Error" : "Result"}</h4>
                <pre className="tool-result">{item.result.content}</pre>
              </>
            ) : null}
          </div>
        </details>
      );
    }
    case "turn_end": {
      const usage = item.usage;
      const label = item.outcome === "completed" ? "Turn completed" : item.outcome === "interrupted" ? "Turn interrupted" : "Turn failed";
      return (
        <div className={`turn-end turn-${item.outcome}`} data-seq={String(item.seq)} data-testid="turn-end">
          {label}
          {item.detail ? `: ${item.detail}` : ""}
          {usage ? ` · ${totalTokens(usage).toLocaleString()} tokens · ${cost(usage.costUsd)}` : ""}
          {item.durationMs ? ` · ${(Number(item.durationMs) / 1000).toFixed(1)} s` : ""}
        </div>
      );
    }
    case "notice":
      return (
        <div className={`notice notice-${item.tone}`} data-seq={String(item.seq)}>
          {item.text}
        </div>
      );
  }
}

export function TranscriptView({ transcript }: { transcript: Transcript }) {
  const end = useRef<HTMLDivElement>(null);
  const box = useRef<HTMLDivElement>(null);
  const count = transcript.items.length;
  const liveLength = [...transcript.live.values()].reduce((n, b) => n + b.text.length, 0);
  useEffect(() => {
    const el = box.current;
    if (el && el.scrollHeight - el.scrollTop - el.clientHeight < 200) end.current?.scrollIntoView({ block: "end" });
  }, [count, liveLength]);
  return (
    <div className="transcript" ref={box} role="log" aria-label="Transcript" aria-live="polite" data-last-seq={String(transcript.lastSeq)}>
      {transcript.items.map((item) => (
        <ItemView key={item.key} item={item} />
      ))}
      {[...transcript.live.values()].map((block) =>
        block.kind === SessionDeltaKind.TEXT ? (
          <div key={block.key} className="msg msg-assistant msg-live" data-testid="live-text">
            <span className="who">Agent</span>
            <div className="text">{block.text}</div>
          </div>
        ) : block.kind === SessionDeltaKind.THINKING ? (
          <details key={block.key} className="thinking msg-live">
            <summary>Thinking…</summary>
            <div className="text">{block.text}</div>
          </details>
        ) : (
          <div key={block.key} className="notice msg-live">Preparing a tool call…</div>
        ),
      )}
      <div ref={end} />
    </div>
  );
}
