// The interaction a turn is parked on: approve or deny a tool call (once, or with a grant scoped
// by an input pattern and an expiry), answer the engine's questions, or give a custom tool's result.
import { useState, type FormEvent } from "react";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describeError, requestId, type Api } from "../api";
import { InteractionKind, type Interaction } from "../gen/astrabox/sessionkernel/v1/session_pb";
import type { RespondToInteractionRequest } from "../gen/astrabox/sessionkernel/v1/session_kernel_service_pb";

type Answer = RespondToInteractionRequest["answer"];

export function InteractionPanel({
  api,
  sessionId,
  interaction,
  onAnswered,
}: {
  api: Api;
  sessionId: string;
  interaction: Interaction;
  onAnswered: () => void;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const [answered, setAnswered] = useState(false);
  const respond = async (answer: Answer) => {
    setBusy(true);
    setError("");
    try {
      await api.sessions.respondToInteraction({ sessionId, interactionId: interaction.interactionId, requestId: requestId("answer"), answer });
      setAnswered(true);
      onAnswered();
    } catch (e) {
      setError(describeError(e));
    } finally {
      setBusy(false);
    }
  };
  if (answered) return <section className="interaction" role="status">Answer sent; the turn resumes.</section>;
  return (
    <section className="interaction" aria-labelledby="interaction-title" data-testid="interaction">
      {interaction.kind === InteractionKind.QUESTION ? (
        <Questions interaction={interaction} busy={busy} onSubmit={(answers) => respond({ case: "answers", value: { $typeName: "astrabox.sessionkernel.v1.QuestionAnswers", answers } })} />
      ) : interaction.kind === InteractionKind.CUSTOM_TOOL ? (
        <CustomTool interaction={interaction} busy={busy} respond={respond} />
      ) : (
        <Approval interaction={interaction} busy={busy} respond={respond} />
      )}
      {error ? <p role="alert" className="error">{error}</p> : null}
    </section>
  );
}

function prettyInput(json: string): string {
  try {
    return JSON.stringify(JSON.parse(json), null, 2);
  } catch {
    return json;
  }
}

function Approval({ interaction, busy, respond }: { interaction: Interaction; busy: boolean; respond: (a: Answer) => void }) {
  const [grant, setGrant] = useState(false);
  const [pattern, setPattern] = useState("");
  const [until, setUntil] = useState("");
  const [denial, setDenial] = useState("");
  const allow = (e: FormEvent) => {
    e.preventDefault();
    respond({
      case: "allow",
      value: {
        $typeName: "astrabox.sessionkernel.v1.AllowTool",
        updatedInputJson: "",
        grant: grant
          ? {
              $typeName: "astrabox.sessionkernel.v1.ToolGrantScope",
              inputPattern: pattern,
              expireTime: until ? timestampFromDate(new Date(until)) : undefined,
            }
          : undefined,
      },
    });
  };
  return (
    <>
      <h2 id="interaction-title">Approve {interaction.toolName}?</h2>
      <pre className="tool-input-full">{prettyInput(interaction.inputJson)}</pre>
      <form onSubmit={allow} className="stack">
        <label className="check">
          <input type="checkbox" checked={grant} onChange={(e) => setGrant(e.target.checked)} />
          Also allow later calls of {interaction.toolName} in this session
        </label>
        {grant ? (
          <div className="grant">
            <label>
              Only calls matching
              <input value={pattern} onChange={(e) => setPattern(e.target.value)} placeholder="every call (e.g. npm test*)" />
            </label>
            <label>
              Until
              <input type="datetime-local" value={until} onChange={(e) => setUntil(e.target.value)} />
            </label>
          </div>
        ) : null}
        <button type="submit" disabled={busy}>{grant ? "Allow and grant" : "Allow once"}</button>
      </form>
      <form
        className="stack deny"
        onSubmit={(e) => {
          e.preventDefault();
          respond({ case: "deny", value: { $typeName: "astrabox.sessionkernel.v1.DenyTool", message: denial } });
        }}
      >
        <label>
          Reason for denying (the agent reads it)
          <input value={denial} onChange={(e) => setDenial(e.target.value)} />
        </label>
        <button type="submit" disabled={busy}>Deny</button>
      </form>
    </>
  );
}

function Questions({ interaction, busy, onSubmit }: { interaction: Interaction; busy: boolean; onSubmit: (answers: Record<string, string>) => void }) {
  const [chosen, setChosen] = useState<Record<string, string[]>>({});
  const [other, setOther] = useState<Record<string, string>>({});
  const submit = (e: FormEvent) => {
    e.preventDefault();
    const answers: Record<string, string> = {};
    for (const q of interaction.questions) {
      const picked = [...(chosen[q.question] ?? [])];
      if (other[q.question]?.trim()) picked.push(other[q.question].trim());
      answers[q.question] = picked.join(", ");
    }
    onSubmit(answers);
  };
  const complete = interaction.questions.every((q) => (chosen[q.question]?.length ?? 0) > 0 || other[q.question]?.trim());
  return (
    <form onSubmit={submit} className="stack">
      <h2 id="interaction-title">The agent asks</h2>
      {interaction.questions.map((q, qi) => (
        <fieldset key={q.question}>
          <legend>{q.header ? `${q.header}: ` : ""}{q.question}</legend>
          {q.options.map((option) => (
            <label key={option} className="check">
              <input
                type={q.multiSelect ? "checkbox" : "radio"}
                name={`question-${qi}`}
                checked={chosen[q.question]?.includes(option) ?? false}
                onChange={(e) =>
                  setChosen((c) => {
                    const was = c[q.question] ?? [];
                    const now = q.multiSelect ? (e.target.checked ? [...was, option] : was.filter((o) => o !== option)) : [option];
                    return { ...c, [q.question]: now };
                  })
                }
              />
              {option}
            </label>
          ))}
          <label>
            Other answer
            <input value={other[q.question] ?? ""} onChange={(e) => setOther((o) => ({ ...o, [q.question]: e.target.value }))} />
          </label>
        </fieldset>
      ))}
      <button type="submit" disabled={busy || !complete}>Send answer</button>
    </form>
  );
}

function CustomTool({ interaction, busy, respond }: { interaction: Interaction; busy: boolean; respond: (a: Answer) => void }) {
  const [content, setContent] = useState("");
  const [isError, setIsError] = useState(false);
  return (
    <form
      className="stack"
      onSubmit={(e) => {
        e.preventDefault();
        respond({ case: "toolResult", value: { $typeName: "astrabox.sessionkernel.v1.CustomToolResult", content, isError } });
      }}
    >
      <h2 id="interaction-title">Custom tool {interaction.toolName}</h2>
      <pre className="tool-input-full">{prettyInput(interaction.inputJson)}</pre>
      <label>
        Result
        <textarea rows={4} value={content} onChange={(e) => setContent(e.target.value)} />
      </label>
      <label className="check">
        <input type="checkbox" checked={isError} onChange={(e) => setIsError(e.target.checked)} />
        The tool failed
      </label>
      <button type="submit" disabled={busy}>Send result</button>
    </form>
  );
}
