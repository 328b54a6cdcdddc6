import { randomBytes } from 'node:crypto';

export interface NatsUsers {
  /** nats-server configuration text with per-host publishing rights. */
  readonly configText: string;
  /** Passwords by user name (node host ids and "fleet"). */
  readonly passwords: Record<string, string>;
}

/**
 * The documented permission model (deploy/nats.conf, docs/reference/nats.md): each node's user may
 * publish and subscribe only under `svc.v1.<its host>.>`, answer requests into its own
 * inbox and the fleet's (no allow_responses: a user could answer its own request and publish
 * anywhere) and read only its own inbox `_INBOX_<user>.>`; so it can neither publish
 * observations for another host, answer another host's `workloads` subject, nor read replies
 * meant for others. The fleet's user may only ask (`svc.v1.*.workloads` and the routers'
 * `svc.v1.*.requests.get|session|active`) and read its inbox.
 */
export function natsUsers(hosts: readonly string[]): NatsUsers {
  const passwords: Record<string, string> = {};
  const users = hosts.map((h) => {
    passwords[h] = randomBytes(12).toString('hex');
    return `    { user: "${h}", password: "${passwords[h]}", permissions: { publish: { allow: ["svc.v1.${h}.>", "_INBOX_${h}.>", "_INBOX_fleet.>"] }, subscribe: { allow: ["svc.v1.${h}.>", "_INBOX_${h}.>"] } } }`;
  });
  passwords['fleet'] = randomBytes(12).toString('hex');
  users.push(
    `    { user: "fleet", password: "${passwords['fleet']}", permissions: { publish: { allow: ["svc.v1.*.workloads", "svc.v1.*.requests.get", "svc.v1.*.requests.session", "svc.v1.*.requests.active"] }, subscribe: { allow: ["_INBOX_fleet.>"] } } }`,
  );
  return { configText: `authorization {\n  users = [\n${users.join(',\n')}\n  ]\n}\n`, passwords };
}
