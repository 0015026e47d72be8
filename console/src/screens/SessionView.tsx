// One session: its live transcript (resumed after the last seq on a dropped stream), the
// pending interaction to answer, a message box, interrupt, and its workspace.
import { useCallback, useEffect, useReducer, useRef, useState, type FormEvent } from "react";
import { describeError, requestId, type Api } from "../api";
import { SessionState, type Session } from "../gen/astrabox/sessionkernel/v1/session_pb";
import { cost, shortId, stateName, tokens } from "../format";
import { href } from "../router";
import { Transcript } from "../transcript";
import { forgetFirstMessage, queuedFirstMessage } from "../firstMessage";
import { watchSession, type WatchStatus } from "../watch";
import { TranscriptView } from "./TranscriptView";
import { InteractionPanel } from "./InteractionPanel";
import { Workspace } from "./Workspace";

const ACTIVE = new Set([SessionState.RUNNING, SessionState.WAITING_FOR_INPUT, SessionState.INTERRUPTING]);

export function SessionView({ api, sessionId }: { api: Api; sessionId: string }) {
  const transcript = useRef(new Transcript()).current;
  const [, redraw] = useReducer((n: number) => n + 1, 0);
  const [session, setSession] = useState<Session | undefined>();
  const [status, setStatus] = useState<WatchStatus>({ state: "connecting", detail: "", reconnects: 0 });
  const [error, setError] = useState("");
  const refreshTimer = useRef<number | undefined>(undefined);

  const refresh = useCallback(() => {
    api.sessions
      .getSession({ sessionId })
      .then((r) => {
        setSession(r.session);
        setError("");
      })
      .catch((e) => setError(describeError(e)));
  }, [api, sessionId]);

  useEffect(() => {
    refresh();
    const controller = new AbortController();
    watchSession(
      api,
      sessionId,
      transcript,
      (sawEvent) => {
        redraw();
        if (sawEvent) {
          window.clearTimeout(refreshTimer.current);
          refreshTimer.current = window.setTimeout(refresh, 200);
        }
      },
      setStatus,
      controller.signal,
    ).catch((e) => setError(describeError(e)));
    return () => {
      controller.abort();
      window.clearTimeout(refreshTimer.current);
    };
  }, [api, sessionId, transcript, refresh]);

  // The first message given at creation, sent once the session can take it.
  const [queued, setQueued] = useState(() => queuedFirstMessage(sessionId));
  useEffect(() => {
    if (!queued || !session || session.state === SessionState.CREATING) return;
    if (session.state === SessionState.FAILED || session.state === SessionState.ARCHIVED) {
      forgetFirstMessage(sessionId);
      setQueued(undefined);
      return;
    }
    let stale = false;
    api.sessions
      .sendMessage({ sessionId, clientMessageId: queued.clientMessageId, text: queued.text })
      .then(() => {
        forgetFirstMessage(sessionId);
        if (!stale) setQueued(undefined);
      })
      .catch((e) => !stale && setError(`The first message was not sent: ${describeError(e)}`));
    return () => {
      stale = true;
    };
  }, [api, sessionId, session, queued]);

  const interrupt = async () => {
    try {
      const r = await api.sessions.interruptTurn({ sessionId, requestId: requestId("interrupt") });
      setSession(r.session);
    } catch (e) {
      setError(describeError(e));
    }
  };

  return (
    <div className="session">
      <div className="session-main">
        <nav aria-label="Breadcrumb" className="crumbs">
          <a href={href({ name: "sessions" })}>Sessions</a> / <span title={sessionId}>{shortId(sessionId)}</span>
        </nav>
        <header className="session-head">
          <h1>Session {shortId(sessionId)}</h1>
          {session ? (
            <dl className="facts">
              <dt>State</dt>
              <dd data-testid="session-state"><span className={`state state-${SessionState[session.state]?.toLowerCase()}`}>{stateName(session.state)}</span></dd>
              <dt>Agent</dt>
              <dd>{session.agent ? `${session.agent.name} v${session.agent.version}` : "—"}</dd>
              <dt>Mode</dt>
              <dd>{session.permissionMode}</dd>
              <dt>Usage</dt>
              <dd data-testid="session-usage">{session.usage ? `${session.usage.turns} turns, ${tokens(session.usage)}, ${cost(session.usage.costUsd)}` : "—"}</dd>
            </dl>
          ) : null}
          <p className={`watch watch-${status.state}`} role="status" data-testid="watch-status">
            {status.state === "live" ? "Live" : status.state === "connecting" ? "Connecting…" : `Reconnecting… ${status.detail}`}
            {status.reconnects ? ` (resumed ${status.reconnects}× after seq ${transcript.lastSeq})` : ""}
          </p>
        </header>
        {error ? <p role="alert" className="error">{error}</p> : null}
        {queued ? <p className="note" role="status">Your first message is sent once the session is ready.</p> : null}
        <TranscriptView transcript={transcript} />
        {transcript.pending ? (
          <InteractionPanel key={transcript.pending.interactionId} api={api} sessionId={sessionId} interaction={transcript.pending} onAnswered={refresh} />
        ) : null}
        <Composer api={api} sessionId={sessionId} canInterrupt={!!session && ACTIVE.has(session.state)} onInterrupt={interrupt} modes={session?.capabilities?.permissionModes ?? []} />
      </div>
      <aside className="session-side">
        <Workspace
          api={api}
          sessionId={sessionId}
          available={!!session?.runtimeAvailable}
          version={`${session?.runtimeAvailable}:${transcript.items.filter((i) => i.kind === "turn_end").length}`}
        />
      </aside>
    </div>
  );
}

function Composer({
  api,
  sessionId,
  canInterrupt,
  onInterrupt,
  modes,
}: {
  api: Api;
  sessionId: string;
  canInterrupt: boolean;
  onInterrupt: () => void;
  modes: string[];
}) {
  const [text, setText] = useState("");
  const [mode, setMode] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const send = async (e: FormEvent) => {
    e.preventDefault();
    if (!text.trim()) return;
    setBusy(true);
    setError("");
    try {
      await api.sessions.sendMessage({ sessionId, clientMessageId: requestId("msg"), text, permissionMode: mode });
      setText("");
    } catch (err) {
      setError(describeError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="composer" onSubmit={send} aria-label="Send a message">
      <label htmlFor="message">Message</label>
      <textarea
        id="message"
        rows={3}
        value={text}
        onChange={(e) => setText(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(e);
        }}
        placeholder="Ask the agent… (Ctrl+Enter sends)"
      />
      <div className="composer-row">
        <label>
          Mode for this turn
          <select value={mode} onChange={(e) => setMode(e.target.value)}>
            <option value="">session's</option>
            {modes.map((m) => <option key={m} value={m}>{m}</option>)}
          </select>
        </label>
        <button type="submit" disabled={busy || !text.trim()}>Send</button>
        <button type="button" onClick={onInterrupt} disabled={!canInterrupt}>Interrupt</button>
      </div>
      {error ? <p role="alert" className="error">{error}</p> : null}
    </form>
  );
}
