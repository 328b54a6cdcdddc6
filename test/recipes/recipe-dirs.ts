import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Recipe } from '../../src/recipes/recipe-config.js';
import { RECIPE_CONFIG } from './fake-docker.js';

/** A recipe with no container in the recorded runtime: its image is there, its GPU (1) is free. */
export const MISTRAL: Recipe = {
  name: 'mistral-7b',
  image: 'vllm/vllm-openai:v0.6.3',
  model: 'mistralai/Mistral-7B-Instruct-v0.3',
  served_model_name: 'mistral-7b',
  context_size: 16384,
  port: 8004,
  gpus: [1],
  env: ['HF_TOKEN'],
};

/** A fresh recipes directory: the three fixture recipes plus `extra`, written as TOML. */
export function recipesDir(...extra: Recipe[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-recipes-'));
  for (const f of ['llama-8b', 'qwen-7b', 'whisper-small'])
    copyFileSync(join(RECIPE_CONFIG, 'recipes', `${f}.toml`), join(dir, `${f}.toml`));
  for (const r of extra)
    writeFileSync(
      join(dir, `${r.name}.toml`),
      Object.entries(r)
        .map(([k, v]) => `${k} = ${JSON.stringify(v)}`)
        .join('\n') + '\n',
    );
  return dir;
}
