/**
 * What one read produced. The reader never throws and never keeps error text: callers map
 * these to fixed messages, so no URL, body or exception can reach the terminal.
 */
export type ReadOutcome =
  | { readonly kind: 'json'; readonly status: number; readonly body: unknown }
  | { readonly kind: 'status'; readonly status: number }
  | {
      readonly kind:
        | 'redirect'
        | 'timeout'
        | 'transport'
        | 'oversized'
        | 'malformed'
        | 'tlsExpired'
        | 'tlsName'
        | 'tlsUntrusted';
    };
