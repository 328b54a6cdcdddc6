import type { Logger } from 'pino';
import type { Bus } from '../streams/bus.js';

/** What every server process takes besides its configuration. */
export interface ServerDeps {
  readonly logger: Logger;
  /** Where named secrets are read from (default: process.env). */
  readonly env?: NodeJS.ProcessEnv;
  /** Run on this bus (the one-process node) instead of opening one from the config. */
  readonly bus?: Bus;
}
