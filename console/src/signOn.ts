// Single sign-on at the OIDC issuer: the authorization-code flow with PKCE (S256), run in the
// browser as a public client. The control plane names the issuer's endpoints in
// /console/config.json; what this tab started (verifier, state, nonce) waits in its session
// storage for the issuer to send the browser back to `${origin}/?code=…&state=…`.
//
// The ID token it yields is the tab's bearer credential, as an API key is. Its payload is read
// here only to check that it answers this tab's request (nonce, audience): the control plane
// verifies its signature, issuer, audience and expiry on every call.

export interface OidcConfig {
  issuer: string;
  clientId: string;
  audience: string;
  scopes: string;
  authorizationEndpoint: string;
  tokenEndpoint: string;
}

export interface ConsoleConfig {
  /** Null: sign in with API keys only. */
  oidc: OidcConfig | null;
  /** Why single sign-on, configured, cannot be offered now. */
  oidcUnavailable?: string;
}

/** What the return from the issuer came to. */
export type SignOnResult = { kind: "none" } | { kind: "signed-in"; token: string } | { kind: "refused"; message: string };

const PENDING_STORAGE = "astrabox.signOn";

interface Pending {
  state: string;
  nonce: string;
  verifier: string;
  redirectUri: string;
}

export async function loadConfig(): Promise<ConsoleConfig> {
  const response = await fetch("/console/config.json", { credentials: "omit", cache: "no-store" });
  if (!response.ok) throw new Error(`/console/config.json answered HTTP ${response.status}`);
  const body = (await response.json()) as Partial<ConsoleConfig>;
  return { oidc: body.oidc ?? null, oidcUnavailable: body.oidcUnavailable };
}

function base64url(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function random(bytes: number): string {
  return base64url(crypto.getRandomValues(new Uint8Array(bytes)));
}

async function s256(verifier: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

function redirectUri(): string {
  return `${window.location.origin}/`;
}

/** Send the browser to the issuer; it comes back to this origin's / with a code. */
export async function startSignOn(config: OidcConfig): Promise<void> {
  // 32 random bytes: a 43-character verifier, 256 bits of entropy (RFC 7636 asks for 43 to 128).
  const pending: Pending = { state: random(32), nonce: random(32), verifier: random(32), redirectUri: redirectUri() };
  sessionStorage.setItem(PENDING_STORAGE, JSON.stringify(pending));
  const url = new URL(config.authorizationEndpoint);
  const params: Record<string, string> = {
    response_type: "code",
    client_id: config.clientId,
    redirect_uri: pending.redirectUri,
    scope: config.scopes,
    state: pending.state,
    nonce: pending.nonce,
    code_challenge: await s256(pending.verifier),
    code_challenge_method: "S256",
  };
  for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
  window.location.assign(url.toString());
}

/** Whether this page load is the issuer sending the browser back (a code or an error in the query). */
export function isReturn(): boolean {
  const query = new URLSearchParams(window.location.search);
  return query.has("code") || query.has("error");
}

let completing: Promise<SignOnResult> | undefined;

/** Finish the flow this page load returns from, once per page load, whoever asks. */
export function completeSignOn(config: ConsoleConfig): Promise<SignOnResult> {
  completing ??= complete(config);
  return completing;
}

async function complete(config: ConsoleConfig): Promise<SignOnResult> {
  const query = new URLSearchParams(window.location.search);
  if (!query.has("code") && !query.has("error")) return { kind: "none" };
  // The code leaves the address bar (and the history) at once; what this tab started is used once.
  window.history.replaceState(null, "", window.location.pathname + window.location.hash);
  const stored = sessionStorage.getItem(PENDING_STORAGE);
  sessionStorage.removeItem(PENDING_STORAGE);
  const error = query.get("error");
  if (error) {
    const description = query.get("error_description");
    return { kind: "refused", message: `The sign-on provider refused: ${error}${description ? ` (${description})` : ""}.` };
  }
  let pending: Pending | undefined;
  try {
    pending = stored ? (JSON.parse(stored) as Pending) : undefined;
  } catch {
    pending = undefined;
  }
  if (!pending) {
    return { kind: "refused", message: "This tab started no sign-in (or already finished it); the answer was ignored. Sign in again." };
  }
  if (!pending.state || query.get("state") !== pending.state) {
    return {
      kind: "refused",
      message: "The sign-on answer does not match the sign-in this tab started (state mismatch): it was refused. Sign in again.",
    };
  }
  if (!config.oidc) return { kind: "refused", message: "Single sign-on is not available now; sign in with an API key." };
  try {
    const token = await redeem(config.oidc, pending, query.get("code") ?? "");
    return { kind: "signed-in", token };
  } catch (e) {
    return { kind: "refused", message: e instanceof Error ? e.message : String(e) };
  }
}

async function redeem(config: OidcConfig, pending: Pending, code: string): Promise<string> {
  let response: Response;
  try {
    response = await fetch(config.tokenEndpoint, {
      method: "POST",
      credentials: "omit",
      cache: "no-store",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "authorization_code",
        code,
        redirect_uri: pending.redirectUri,
        client_id: config.clientId,
        code_verifier: pending.verifier,
      }),
    });
  } catch (e) {
    throw new Error(`The sign-on provider's token endpoint cannot be reached: ${e instanceof Error ? e.message : e}.`);
  }
  const body = (await response.json().catch(() => ({}))) as Record<string, unknown>;
  if (!response.ok) {
    const error = typeof body.error === "string" ? body.error : `HTTP ${response.status}`;
    throw new Error(`The sign-on provider did not give a token: ${error}.`);
  }
  const token = body.id_token;
  if (typeof token !== "string" || !token) throw new Error("The sign-on provider answered without an ID token.");
  const claims = payload(token);
  if (claims.nonce !== pending.nonce) throw new Error("The ID token is not this tab's (nonce mismatch): it was refused.");
  const audiences = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
  if (!audiences.includes(config.clientId)) {
    throw new Error("The ID token names another audience than this console: it was refused.");
  }
  return token;
}

/** A JSON Web Token's claims, unverified (the control plane verifies the signature). */
function payload(token: string): Record<string, unknown> {
  const part = token.split(".")[1] ?? "";
  try {
    const binary = atob(part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "="));
    const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
    const claims: unknown = JSON.parse(new TextDecoder().decode(bytes));
    if (claims && typeof claims === "object") return claims as Record<string, unknown>;
  } catch {
    // fall through
  }
  throw new Error("The sign-on provider's ID token cannot be read.");
}
