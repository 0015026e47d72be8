// The console's doors onto the API: one Connect transport on this origin, the caller's key on
// every call (`Authorization: Bearer`), a client per service, and errors made readable.
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { AdminService } from "./gen/astrabox/admin/v1/admin_service_pb";
import { AgentService } from "./gen/astrabox/agents/v1/agent_service_pb";
import { CredentialService } from "./gen/astrabox/credentialstore/v1/credential_service_pb";
import { EnvironmentService } from "./gen/astrabox/environments/v1/environment_service_pb";
import { SessionKernelService } from "./gen/astrabox/sessionkernel/v1/session_kernel_service_pb";

export interface Api {
  sessions: Client<typeof SessionKernelService>;
  admin: Client<typeof AdminService>;
  agents: Client<typeof AgentService>;
  environments: Client<typeof EnvironmentService>;
  credentials: Client<typeof CredentialService>;
  /** The key the clients send; the upload's plain fetch sends it too. */
  apiKey: string;
}

/**
 * `onRefused` hears every call the service refuses as unauthenticated (a key revoked, a token
 * expired): the credential is no use any more, whichever screen made the call.
 */
export function makeApi(apiKey: string, onRefused: (error: ConnectError) => void = () => {}): Api {
  const bearer: Interceptor = (next) => async (request) => {
    request.header.set("Authorization", `Bearer ${apiKey}`);
    return next(request);
  };
  const refused: Interceptor = (next) => async (request) => {
    try {
      const response = await next(request);
      if (!response.stream) return response;
      return { ...response, message: heedRefusal(response.message, onRefused) };
    } catch (e) {
      if (isUnauthenticated(e)) onRefused(e as ConnectError);
      throw e;
    }
  };
  const transport = createConnectTransport({
    baseUrl: window.location.origin,
    useBinaryFormat: false,
    interceptors: [refused, bearer],
    // No cookies: the key is the only credential.
    fetch: (input, init) => globalThis.fetch(input, { ...init, credentials: "omit" }),
  });
  return {
    sessions: createClient(SessionKernelService, transport),
    admin: createClient(AdminService, transport),
    agents: createClient(AgentService, transport),
    environments: createClient(EnvironmentService, transport),
    credentials: createClient(CredentialService, transport),
    apiKey,
  };
}

async function* heedRefusal<T>(messages: AsyncIterable<T>, onRefused: (error: ConnectError) => void): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (e) {
    if (isUnauthenticated(e)) onRefused(e as ConnectError);
    throw e;
  }
}

/** google.rpc.ErrorInfo, read from its wire form (the console has no generated googleapis code). */
export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

export function decodeErrorInfo(bytes: Uint8Array): ErrorInfo {
  const reader = new BinaryReader(bytes);
  const info: ErrorInfo = { reason: "", domain: "", metadata: {} };
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === 2) info.reason = reader.string();
    else if (field === 2 && wireType === 2) info.domain = reader.string();
    else if (field === 3 && wireType === 2) {
      const entry = new BinaryReader(reader.bytes());
      let key = "";
      let value = "";
      while (entry.pos < entry.len) {
        const [f, w] = entry.tag();
        if (f === 1 && w === 2) key = entry.string();
        else if (f === 2 && w === 2) value = entry.string();
        else entry.skip(w);
      }
      info.metadata[key] = value;
    } else reader.skip(wireType);
  }
  return info;
}

/** The ErrorInfo of an error, when it carries one. */
export function errorInfo(error: unknown): ErrorInfo | undefined {
  if (!(error instanceof ConnectError)) return undefined;
  for (const detail of error.details) {
    if ("desc" in detail) continue;
    if (detail.type === "google.rpc.ErrorInfo") {
      try {
        return decodeErrorInfo(detail.value);
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/** One line a person can read: the service's message with its code and reason. */
export function describeError(error: unknown): string {
  if (error instanceof ConnectError) {
    const info = errorInfo(error);
    // The gRPC name people see in the CLI and the docs: INVALID_ARGUMENT, not InvalidArgument.
    const code = (Code[error.code] ?? String(error.code)).replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
    const reason = info?.reason ? `, ${info.reason}` : "";
    return `${error.rawMessage || "request failed"} (${code}${reason})`;
  }
  if (error instanceof Error) return error.message;
  return String(error);
}

export function isAbort(error: unknown): boolean {
  return (
    (error instanceof ConnectError && error.code === Code.Canceled) ||
    (error instanceof DOMException && error.name === "AbortError")
  );
}

export function isUnauthenticated(error: unknown): boolean {
  return error instanceof ConnectError && error.code === Code.Unauthenticated;
}

/** A fresh idempotency key (1–128 characters of [A-Za-z0-9._:-]). */
export function requestId(prefix = "console"): string {
  return `${prefix}-${crypto.randomUUID()}`;
}
