import { useState, type FormEvent } from "react";

export function Login({ onSignIn, error }: { onSignIn: (key: string) => void; error: string }) {
  const [key, setKey] = useState("");
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (key.trim()) onSignIn(key.trim());
  };
  return (
    <main className="login">
      <h1>AstraBox console</h1>
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
          autoFocus
        />
        <p className="hint">
          Kept in this tab only (session storage) and sent with every call. <code>astrabox up</code> saves its admin key
          in <code>~/.config/astrabox/api-key</code>.
        </p>
        <button type="submit" disabled={!key.trim()}>Sign in</button>
        {error ? <p role="alert" className="error">{error}</p> : null}
      </form>
    </main>
  );
}
