import { hash } from 'node:crypto';
import type { Kind, Owner } from './enums.js';

/**
 * The record ID of CONTRACT.md: `wl_` + the first 128 bits of SHA-256 over
 * `host \0 owner \0 kind \0 native_id`, in lowercase hex. Deterministic, and never fed from
 * prompts, labels, filenames, endpoints or credentials: `nativeId` is the owner's own key.
 */
export function recordId(host: string, owner: Owner, kind: Kind, nativeId: string): string {
  // One-shot hash (UTF-8 in, hex out): no Hash object per call.
  return 'wl_' + hash('sha256', `${host}\0${owner}\0${kind}\0${nativeId}`, 'hex').slice(0, 32);
}
