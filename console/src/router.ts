// Hash routes (`#/sessions/ID`): the web port serves only / and /assets/, so the route lives after the #.
import { useEffect, useState } from "react";

export type Route =
  | { name: "sessions" }
  | { name: "session"; id: string }
  | { name: "agents"; agent?: string }
  | { name: "environments"; environment?: string }
  | { name: "operators" };

export function parseRoute(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "sessions" && parts[1]) return { name: "session", id: parts[1] };
  if (parts[0] === "agents") return { name: "agents", agent: parts[1] };
  if (parts[0] === "environments") return { name: "environments", environment: parts[1] };
  if (parts[0] === "operators") return { name: "operators" };
  return { name: "sessions" };
}

export function href(route: Route): string {
  switch (route.name) {
    case "session":
      return `#/sessions/${encodeURIComponent(route.id)}`;
    case "agents":
      return route.agent ? `#/agents/${encodeURIComponent(route.agent)}` : "#/agents";
    case "environments":
      return route.environment ? `#/environments/${encodeURIComponent(route.environment)}` : "#/environments";
    case "operators":
      return "#/operators";
    default:
      return "#/sessions";
  }
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(window.location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener("hashchange", onChange);
    return () => window.removeEventListener("hashchange", onChange);
  }, []);
  return route;
}
