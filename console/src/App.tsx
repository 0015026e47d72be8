// The console's frame: sign-in gate, navigation, and the screen of the current hash route.
import { useCallback, useEffect, useMemo, useState } from "react";
import { ConnectError } from "@connectrpc/connect";
import { makeApi, describeError, errorInfo, isUnauthenticated } from "./api";
import { Role, type Caller } from "./gen/astrabox/admin/v1/admin_service_pb";
import { href, useRoute } from "./router";
import { Login } from "./screens/Login";
import { completeSignOn, isReturn, loadConfig, type ConsoleConfig } from "./signOn";
import { Sessions } from "./screens/Sessions";
import { SessionView } from "./screens/SessionView";
import { Agents } from "./screens/Agents";
import { Environments } from "./screens/Environments";
import { Operators } from "./screens/Operators";

const KEY_STORAGE = "astrabox.apiKey";

export function App() {
  const [apiKey, setApiKey] = useState(() => sessionStorage.getItem(KEY_STORAGE) ?? "");
  const [caller, setCaller] = useState<Caller | undefined>();
  const [error, setError] = useState("");
  const [config, setConfig] = useState<ConsoleConfig | undefined>();
  // This page load is the issuer sending the browser back: finish that before anything else.
  const [returning, setReturning] = useState(isReturn);
  const route = useRoute();

  const signOut = useCallback(() => {
    sessionStorage.removeItem(KEY_STORAGE);
    setApiKey("");
    setCaller(undefined);
  }, []);

  // A credential the service refuses (expired, revoked) is dropped: back to the sign-in, saying why.
  // Only the credential in use now: a late refusal of one signed out already changes nothing.
  const refused = useCallback(
    (credential: string, e: unknown) => {
      if (sessionStorage.getItem(KEY_STORAGE) !== credential) return;
      const expired = errorInfo(e)?.reason === "CREDENTIALS_EXPIRED";
      setError(expired ? `Your sign-in has expired; sign in again. The service said: ${describeError(e)}` : describeError(e));
      signOut();
    },
    [signOut],
  );
  const api = useMemo(
    () => (apiKey ? makeApi(apiKey, (e: ConnectError) => refused(apiKey, e)) : undefined),
    [apiKey, refused],
  );

  useEffect(() => {
    let stale = false;
    loadConfig()
      .then((c) => !stale && setConfig(c))
      .catch((e) => {
        if (stale) return;
        setConfig({ oidc: null, oidcUnavailable: e instanceof Error ? e.message : String(e) });
      });
    return () => {
      stale = true;
    };
  }, []);

  useEffect(() => {
    if (!returning || !config) return;
    void completeSignOn(config).then((result) => {
      if (result.kind === "signed-in") {
        setError("");
        sessionStorage.setItem(KEY_STORAGE, result.token);
        setCaller(undefined);
        setApiKey(result.token);
      } else if (result.kind === "refused") {
        signOut();
        setError(result.message);
      }
      setReturning(false);
    });
  }, [returning, config, signOut]);

  useEffect(() => {
    if (!api) return;
    let stale = false;
    api.admin
      .whoAmI({})
      .then((r) => !stale && setCaller(r.caller))
      .catch((e) => {
        if (stale || isUnauthenticated(e)) return; // a refused credential: `refused` has said why
        setError(describeError(e));
        signOut();
      });
    return () => {
      stale = true;
    };
  }, [api, signOut]);

  const signIn = (key: string) => {
    setError("");
    sessionStorage.setItem(KEY_STORAGE, key);
    setApiKey(key);
  };

  if (returning) return <p className="loading" role="status">Finishing the sign-in…</p>;
  if (!api) return <Login onSignIn={signIn} error={error} config={config} />;
  if (!caller) return <p className="loading" role="status">Checking the credential…</p>;

  const current = route.name === "session" ? "sessions" : route.name;
  return (
    <div className="frame">
      <header className="topbar">
        <span className="brand">AstraBox</span>
        <nav aria-label="Main">
          <a href={href({ name: "sessions" })} aria-current={current === "sessions" ? "page" : undefined}>Sessions</a>
          <a href={href({ name: "agents" })} aria-current={current === "agents" ? "page" : undefined}>Agents</a>
          <a href={href({ name: "environments" })} aria-current={current === "environments" ? "page" : undefined}>Environments</a>
          {caller.project?.operator && caller.role === Role.ADMIN ? (
            <a href={href({ name: "operators" })} aria-current={current === "operators" ? "page" : undefined}>Operators</a>
          ) : null}
        </nav>
        <span className="whoami" data-testid="whoami">
          {caller.keyId ? `key ${caller.keyId}` : caller.subject}: {(Role[caller.role] ?? "").toLowerCase()} of project{" "}
          {caller.project?.name}
          {caller.project?.operator ? " (operator)" : ""}
        </span>
        <button type="button" onClick={signOut}>Sign out</button>
      </header>
      <main>
        {route.name === "sessions" && <Sessions api={api} />}
        {route.name === "session" && <SessionView key={route.id} api={api} sessionId={route.id} />}
        {route.name === "agents" && <Agents api={api} selected={route.agent} />}
        {route.name === "environments" && <Environments api={api} selected={route.environment} />}
        {route.name === "operators" && <Operators api={api} />}
      </main>
    </div>
  );
}
