/** The fixed vocabularies of SPEC.md and CONTRACT.md, as `as const` tuples plus types. */

export const OWNERS = ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'] as const;
export type Owner = (typeof OWNERS)[number];

export const KINDS = ['router-request', 'controller-operation', 'benchmark-job', 'media-job', 'recipe-serve'] as const;
export type Kind = (typeof KINDS)[number];

export const STATES = [
  'checking',
  'admitted',
  'dispatched',
  'streaming',
  'queued',
  'running',
  'terminal',
  'configured',
  'absent',
  'unavailable',
  'unsupported',
] as const;
export type State = (typeof STATES)[number];

export const PHASES = [
  'checking',
  'admitted',
  'dispatched',
  'streaming',
  'queued',
  'running',
  'completed',
  'failed',
  'cancelled',
  'awaiting-approval',
  'preparing',
  'submitting',
  'configured',
  'absent',
  'unavailable',
  'unsupported',
] as const;
export type Phase = (typeof PHASES)[number];

export const OUTCOMES = [
  'success',
  'error',
  'cancelled',
  'timeout',
  'rejected',
  'disconnected',
  'unavailable',
  'unknown',
] as const;
export type Outcome = (typeof OUTCOMES)[number];

export const SOURCE_AUTHORITIES = [
  'router-memory',
  'controller-store',
  'benchmark-store',
  'media-store',
  'managed-status',
] as const;
export type SourceAuthority = (typeof SOURCE_AUTHORITIES)[number];

export const QUALITIES = [
  'recorded',
  'configured',
  'observed-running',
  'healthy-identity',
  'stale',
  'absent',
  'inspection-error',
] as const;
export type Quality = (typeof QUALITIES)[number];

export const PROGRESS_UNITS = ['items', 'steps', 'requests'] as const;
export type ProgressUnit = (typeof PROGRESS_UNITS)[number];

export const RESULT_STATUSES = ['complete', 'partial', 'unavailable'] as const;
export type ResultStatus = (typeof RESULT_STATUSES)[number];

export const SOURCE_REASONS = [
  'no-observation',
  'timeout',
  'inspection-error',
  'not-served',
  'overloaded',
  'malformed',
] as const;
export type SourceReason = (typeof SOURCE_REASONS)[number];

export const NODE_CONDITIONS = ['unreachable', 'sleeping', 'incompatible', 'wrong-identity', 'malformed'] as const;
export type NodeCondition = (typeof NODE_CONDITIONS)[number];

/** The one kind each owner may report (SPEC.md, owner/kind pairing). */
export const KIND_OF_OWNER: Readonly<Record<Owner, Kind>> = {
  router: 'router-request',
  controller: 'controller-operation',
  benchmark: 'benchmark-job',
  media: 'media-job',
  recipe: 'recipe-serve',
  manifest: 'recipe-serve',
};

/** The authority each owner's records represent. */
export const AUTHORITY_OF_OWNER: Readonly<Record<Owner, SourceAuthority>> = {
  router: 'router-memory',
  controller: 'controller-store',
  benchmark: 'benchmark-store',
  media: 'media-store',
  recipe: 'managed-status',
  manifest: 'managed-status',
};

/** Active states carry no outcome; they are work in flight. */
export const ACTIVE_STATES: ReadonlySet<State> = new Set([
  'checking',
  'admitted',
  'dispatched',
  'streaming',
  'queued',
  'running',
]);

/** "Current" states: returned by the default query whatever their age. */
export const CURRENT_STATES: ReadonlySet<State> = new Set(['configured', 'absent', 'unavailable', 'unsupported']);

/** States whose records must carry an outcome (DESIGN.md); every other state must omit it. */
export const OUTCOME_STATES: ReadonlySet<State> = new Set(['terminal', 'unavailable', 'unsupported']);

/** Phases each state admits (DESIGN.md, states and transitions). */
export const PHASES_OF_STATE: Readonly<Record<State, readonly Phase[]>> = {
  checking: ['checking'],
  admitted: ['admitted'],
  dispatched: ['dispatched'],
  streaming: ['streaming'],
  queued: ['queued', 'awaiting-approval'],
  running: ['running', 'awaiting-approval', 'preparing', 'submitting'],
  terminal: ['completed', 'failed', 'cancelled'],
  configured: ['configured'],
  absent: ['absent'],
  unavailable: ['unavailable'],
  unsupported: ['unsupported'],
};

/** States each kind may take (DESIGN.md). */
export const STATES_OF_KIND: Readonly<Record<Kind, ReadonlySet<State>>> = {
  'router-request': new Set([
    'checking',
    'admitted',
    'dispatched',
    'streaming',
    'terminal',
    'unavailable',
    'unsupported',
  ]),
  'controller-operation': new Set(['queued', 'running', 'terminal', 'unavailable', 'unsupported']),
  'benchmark-job': new Set(['queued', 'running', 'terminal', 'unavailable', 'unsupported']),
  'media-job': new Set(['queued', 'running', 'terminal', 'unavailable', 'unsupported']),
  'recipe-serve': new Set(['configured', 'absent', 'running', 'unavailable', 'unsupported']),
};

/** The highest observation quality recipe and manifest records may report (SPEC.md rule 4). */
export const RECIPE_QUALITIES: ReadonlySet<Quality> = new Set([
  'configured',
  'observed-running',
  'stale',
  'absent',
  'inspection-error',
]);
