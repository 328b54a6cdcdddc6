/** The sim's timing and model, shared by engine-sim.ts and the handlers it calls (so that none of them imports engine-sim.ts back). */
export interface EngineSimOptions {
  ttftMs: number;
  tokenDelayMs: number;
  tokens: number;
  model: string;
  maxModelLen: number;
}
