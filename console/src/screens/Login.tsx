import { useState, type FormEvent } from "react";
import { startSignOn, type ConsoleConfig } from "../signOn";

export function Login({
  onSignIn,
  error,
  config,
}: {
  onSignIn: (key: string) => void;
  error: string;
  /** How people may sign in here; undefined while it loads (the key form works meanwhile). */
  config?: ConsoleConfig;
}) {
  const [key, setKey] = useState("");
  const [leaving, setLeaving] = useState(false);
  const [startError, setStartError] = useState("");
  const oidc = config?.oidc ?? null;
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (key.trim()) onSignIn(key.trim());
  };
  const signOn = () => {
    if (!oidc) return;
    setLeaving(true);
    setStartError("");
    startSignOn(oidc).catch((e) => {
      setLeaving(false);
      setStartError(`Single sign-on could not start: ${e instanceof Error ? e.message : String(e)}`);
    });
  };
  const shown = startError || error;
  return (
    <main className="login">
      <h1>AstraBox console</h1>
      {shown ? <p role="alert" className="error">{shown}</p> : null}
      {oidc ? (
        <div className="sso">
          <button type="button" className="sso-button" onClick={signOn} disabled={leaving} autoFocus>
            Sign in with single sign-on
          </button>
          <p className="hint">
            At <span className="code">{issuerName(oidc.issuer)}</span>; you come back here signed in.
          </p>
          <p className="divider">or with an API key</p>
        </div>
      ) : null}
      {config?.oidcUnavailable ? (
        <p className="hint" data-testid="sso-unavailable">
          Single sign-on is configured but unavailable: {config.oidcUnavailable}. Sign in with an API key meanwhile.
        </p>
      ) : null}
      <form onSubmit={submit}>
        <label htmlFor="api-key">API key</label>
        <input
          id="api-key"
          type="password"
          autoComplete="off"
          spellCheck={false}
          value={key}
          onChange={(e) => setKey(e.target.value)}
          placeholder="abx_…"
          autoFocus={!oidc}
        />
        <p className="hint">
          Kept in this tab only (session storage) and sent with every call. <code>astrabox up</code> saves its admin key
          in <code>~/.config/astrabox/api-key</code>.
        </p>
        <button type="submit" disabled={!key.trim()}>Sign in</button>
      </form>
    </main>
  );
}

function issuerName(issuer: string): string {
  try {
    return new URL(issuer).host;
  } catch {
    return issuer;
  }
}
