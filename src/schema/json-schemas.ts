import { FleetResult, NodeResult } from './envelopes.js';

// TypeBox schemas are JSON Schema already; a JSON round trip drops TypeBox's symbol keys.
export const NODE_RESULT_JSON_SCHEMA: object = JSON.parse(JSON.stringify(NodeResult));
export const FLEET_RESULT_JSON_SCHEMA: object = JSON.parse(JSON.stringify(FleetResult));
