/**
 * The value of environment variable `name`, or undefined when it is unset. Only the
 * environment's own entries count: a name such as `constructor`, `toString` or `__proto__`
 * must read as unset, never as what every JavaScript object inherits.
 */
export function envVar(env: Readonly<Record<string, string | undefined>>, name: string): string | undefined {
  if (!Object.hasOwn(env, name)) return undefined;
  const v = env[name];
  return typeof v === 'string' ? v : undefined;
}
