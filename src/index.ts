/**
 * The public API of `svc-serving` as a library: the schema types and their checkers, the pure
 * rules (filters, node query, fleet composition, diagnosis interpretation) and a small typed
 * read client. Everything else is internal and may change without notice.
 */
export { SCHEMA_ID, WorkloadRecord, type Progress } from './schema/record.js';
export {
  Truncation,
  SourceResult,
  NodeResult,
  FleetResult,
  ObservationBatch,
  checkNodeResult,
  checkFleetResult,
  checkBatch,
  MAX_RECORDS_PER_SOURCE,
  MAX_RECORDS_PER_RESULT,
} from './schema/envelopes.js';
export {
  OWNERS,
  KINDS,
  STATES,
  type Owner,
  type Kind,
  type State,
  type Phase,
  type Outcome,
  type Quality,
  type ResultStatus,
  type SourceReason,
  type NodeCondition,
} from './schema/enums.js';
export { FilterArgs, FILTER_NAMES, parseFilterArgs, resolveFilters, type Filters } from './schema/filters.js';
export {
  TerminalRecord,
  checkTerminalRecord,
  type RouteName,
  type RequestOutcome,
  type FinishReason,
  type Usage,
  type OutputLimit,
} from './schema/terminal-record.js';
export {
  DIAGNOSIS_SCHEMA_ID,
  INTERPRETATION_CODES,
  NOT_FOUND_INTERPRETATION,
  RouterStatus,
  ActiveRequest,
  checkRouterStatus,
  interpret,
  terminalEvidence,
  diagnoseLookup,
  diagnoseHistory,
  type DiagnosisEnvelope,
  type InterpretationCode,
  type SessionEntry,
  type LineageKey,
  type LookupFault,
} from './schema/diagnosis.js';
export { FleetDiagnosis, checkFleetDiagnosis, type SearchOutcome } from './schema/diagnosis-search.js';
export { selects, QUERY_SLACK_MS, ANSWER_SLACK_MS } from './schema/selects.js';
export { classifyAnswer, type NodeAnswer } from './schema/answer-checks.js';

export { createNodeSnapshot, type NodeSnapshot } from './streams/node-snapshot.js';
export { foldNode, type FoldEvent } from './streams/fold-node.js';
export {
  queryNode,
  CONTROLLER_OWNERS,
  ROUTER_OWNERS,
  DEFAULT_STALE_AFTER_MS,
  type QueryOptions,
} from './streams/query-node.js';
export { composeFleet, type DeclaredNode } from './streams/compose-fleet.js';

export { SvcError, ErrorCode } from './errors.js';
export { readNode, readFleet, READ_FAILURES, type ReadOptions, type NodeReadOptions } from './client/read-client.js';
