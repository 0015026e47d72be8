// Workspace transfers: a tar archive of files the user picked (uploaded as a Connect
// client stream through a plain fetch, since browsers cannot stream a request with connect-web),
// and a downloaded archive, saved as it is or, for one file, as that file.
import { Code, ConnectError } from "@connectrpc/connect";
import { base64Encode } from "@bufbuild/protobuf/wire";
import type { Api } from "./api";

const BLOCK = 512;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function octal(value: number, width: number): string {
  return value.toString(8).padStart(width - 1, "0") + "\0";
}

function header(name: string, size: number, type: string, mtime: number): Uint8Array {
  const h = new Uint8Array(BLOCK);
  const put = (text: string, offset: number, width: number) => h.set(encoder.encode(text).subarray(0, width), offset);
  put(name, 0, 100);
  put(octal(0o644, 8), 100, 8);
  put(octal(0, 8), 108, 8);
  put(octal(0, 8), 116, 8);
  put(octal(size, 12), 124, 12);
  put(octal(mtime, 12), 136, 12);
  put("        ", 148, 8);
  put(type, 156, 1);
  put("ustar\0", 257, 6);
  put("00", 263, 2);
  const sum = h.reduce((a, b) => a + b, 0);
  put(octal(sum, 7) + " ", 148, 8);
  return h;
}

/** Bytes as a part of a Blob (TypeScript's DOM types want an ArrayBuffer-backed view). */
export function part(data: Uint8Array): BlobPart {
  return data as Uint8Array<ArrayBuffer>;
}

function padded(data: Uint8Array): BlobPart[] {
  const rest = data.length % BLOCK;
  return rest ? [part(data), new Uint8Array(BLOCK - rest)] : [part(data)];
}

/** A ustar archive of `files` (names relative to the target directory; long names in PAX records). */
export async function tarFiles(files: { name: string; file: Blob; mtime: number }[]): Promise<Blob> {
  const parts: BlobPart[] = [];
  for (const { name, file, mtime } of files) {
    const seconds = Math.max(0, Math.floor(mtime / 1000));
    if (encoder.encode(name).length > 99) {
      const body = encoder.encode(paxRecord("path", name));
      parts.push(part(header("PaxHeader", body.length, "x", seconds)), ...padded(body));
    }
    parts.push(part(header(name.slice(0, 99), file.size, "0", seconds)));
    parts.push(file);
    if (file.size % BLOCK) parts.push(new Uint8Array(BLOCK - (file.size % BLOCK)));
  }
  parts.push(new Uint8Array(BLOCK * 2));
  return new Blob(parts as BlobPart[], { type: "application/x-tar" });
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let length = encoder.encode(body).length;
  length += String(length).length;
  if (String(length).length !== String(length - String(length).length).length) length += 1;
  return `${length}${body}`;
}

/** The contents of the first regular file of a tar archive, when it is one file. */
export function firstFileOf(archive: Uint8Array): { name: string; data: Uint8Array } | null {
  let offset = 0;
  let longName = "";
  while (offset + BLOCK <= archive.length) {
    const h = archive.subarray(offset, offset + BLOCK);
    if (h.every((b) => b === 0)) return null;
    const field = (start: number, width: number) => decoder.decode(h.subarray(start, start + width)).replace(/\0.*$/s, "");
    const size = parseInt(field(124, 12).trim() || "0", 8);
    const type = field(156, 1) || "0";
    const prefix = field(345, 155);
    const bodyStart = offset + BLOCK;
    const body = archive.subarray(bodyStart, bodyStart + size);
    offset = bodyStart + Math.ceil(size / BLOCK) * BLOCK;
    if (type === "x") {
      const match = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(decoder.decode(body));
      if (match) longName = match[1];
      continue;
    }
    if (type === "L") {
      longName = decoder.decode(body).replace(/\0.*$/s, "");
      continue;
    }
    if (type === "0" || type === "\0" || type === "7") {
      const name = longName || (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100));
      return { name, data: body.slice() };
    }
    longName = "";
  }
  return null;
}

/** The workspace path's archive, read to the end. */
export async function downloadArchive(api: Api, sessionId: string, path: string, signal?: AbortSignal): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let length = 0;
  for await (const response of api.sessions.downloadWorkspaceArchive({ sessionId, path }, { signal })) {
    chunks.push(response.chunk);
    length += response.chunk.length;
  }
  const all = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    all.set(chunk, at);
    at += chunk.length;
  }
  return all;
}

/** Offers `data` to the user as a downloaded file named `name`. */
export function saveAs(data: BlobPart, name: string, type = "application/octet-stream"): void {
  const url = URL.createObjectURL(new Blob([data], { type }));
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  link.rel = "noopener";
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

const CHUNK = 512 * 1024; // a message's chunk: at most 1 MiB, base64 grows it by a third

function envelope(json: unknown, flags = 0): Uint8Array {
  const body = encoder.encode(JSON.stringify(json));
  const out = new Uint8Array(5 + body.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, body.length, false);
  out.set(body, 5);
  return out;
}

/** Uploads `archive` into `path` of the workspace: UploadWorkspaceArchive as enveloped Connect JSON. */
export async function uploadArchive(
  api: Api,
  sessionId: string,
  path: string,
  archive: Blob,
): Promise<{ entries: number; bytes: number }> {
  const parts: BlobPart[] = [part(envelope({ sessionId, path }))];
  for (let at = 0; at < archive.size; at += CHUNK) {
    const chunk = new Uint8Array(await archive.slice(at, at + CHUNK).arrayBuffer());
    parts.push(part(envelope({ chunk: base64Encode(chunk) })));
  }
  const response = await fetch(`${window.location.origin}/astrabox.sessionkernel.v1.SessionKernelService/UploadWorkspaceArchive`, {
    method: "POST",
    credentials: "omit",
    headers: {
      "Content-Type": "application/connect+json",
      "Connect-Protocol-Version": "1",
      Authorization: `Bearer ${api.apiKey}`,
    },
    body: new Blob(parts as BlobPart[]),
  });
  const body = new Uint8Array(await response.arrayBuffer());
  if (!response.ok) {
    throw errorFromJson(safeJson(decoder.decode(body)), `upload failed: HTTP ${response.status}`);
  }
  let result: { entries: number; bytes: number } | null = null;
  let at = 0;
  while (at + 5 <= body.length) {
    const flags = body[at];
    const length = new DataView(body.buffer, body.byteOffset + at + 1, 4).getUint32(0, false);
    const message = safeJson(decoder.decode(body.subarray(at + 5, at + 5 + length)));
    at += 5 + length;
    if (flags & 0x02) {
      const end = message as { error?: unknown } | null;
      if (end?.error) throw errorFromJson(end.error, "upload failed");
    } else {
      const m = (message ?? {}) as { entries?: string | number; bytes?: string | number };
      result = { entries: Number(m.entries ?? 0), bytes: Number(m.bytes ?? 0) };
    }
  }
  if (!result) throw new ConnectError("the upload got no answer", Code.Unknown);
  return result;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

const CODES: Record<string, Code> = {
  canceled: Code.Canceled,
  unknown: Code.Unknown,
  invalid_argument: Code.InvalidArgument,
  deadline_exceeded: Code.DeadlineExceeded,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  permission_denied: Code.PermissionDenied,
  resource_exhausted: Code.ResourceExhausted,
  failed_precondition: Code.FailedPrecondition,
  aborted: Code.Aborted,
  out_of_range: Code.OutOfRange,
  unimplemented: Code.Unimplemented,
  internal: Code.Internal,
  unavailable: Code.Unavailable,
  data_loss: Code.DataLoss,
  unauthenticated: Code.Unauthenticated,
};

function errorFromJson(json: unknown, fallback: string): ConnectError {
  const e = (json ?? {}) as { code?: string; message?: string; details?: { type?: string; value?: string }[] };
  const details = (e.details ?? [])
    .filter((d) => typeof d.type === "string" && typeof d.value === "string")
    .map((d) => ({ type: d.type as string, value: base64ToBytes(d.value as string), debug: undefined }));
  const error = new ConnectError(e.message ?? fallback, CODES[e.code ?? ""] ?? Code.Unknown);
  error.details.push(...details);
  return error;
}

function base64ToBytes(text: string): Uint8Array {
  const normal = text.replace(/-/g, "+").replace(/_/g, "/");
  const binary = atob(normal + "=".repeat((4 - (normal.length % 4)) % 4));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}
