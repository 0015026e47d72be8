// The first message given with a new session: CreateSession takes none and a CREATING session
// takes no message, so it waits in this tab's session storage until the session is ready, keeping
// its client_message_id (a retry or a reload never sends it twice).

export interface QueuedMessage {
  clientMessageId: string;
  text: string;
}

const key = (sessionId: string) => `astrabox.firstMessage.${sessionId}`;

export function queueFirstMessage(sessionId: string, message: QueuedMessage): void {
  sessionStorage.setItem(key(sessionId), JSON.stringify(message));
}

export function queuedFirstMessage(sessionId: string): QueuedMessage | undefined {
  try {
    const value = JSON.parse(sessionStorage.getItem(key(sessionId)) ?? "null") as QueuedMessage | null;
    return value && typeof value.text === "string" && typeof value.clientMessageId === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}

export function forgetFirstMessage(sessionId: string): void {
  sessionStorage.removeItem(key(sessionId));
}
