import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { ConfigError, StoreGoneError } from '../../src/errors.js';
import { LOG_OPTIONS, serializeErr } from '../../src/logger.js';

const CANARY = 'secret-canary /path/to/secret';

/** A logger made as every logger of ours is, and the lines it wrote, parsed and raw. */
function capture(): { logger: pino.Logger; lines: Record<string, unknown>[]; raw: string[] } {
  const raw: string[] = [];
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { ...LOG_OPTIONS, level: 'info' },
    { write: (l: string) => void (raw.push(l), lines.push(JSON.parse(l) as Record<string, unknown>)) },
  );
  return { logger, lines, raw };
}

/** A system error as node throws it: a code, a message that names the path. */
function systemError(): NodeJS.ErrnoException {
  try {
    readFileSync(`/nonexistent/${CANARY}`);
  } catch (err) {
    return err as NodeJS.ErrnoException;
  }
  throw new Error('unreachable');
}

describe('logger - the err serializer', () => {
  it('keeps only the name of an error: never its message, stack or cause', () => {
    const { logger, lines, raw } = capture();
    logger.warn({ err: new Error(CANARY, { cause: new Error(CANARY) }) }, 'failed');
    assert.deepEqual(lines[0]!['err'], { name: 'Error' });
    assert.ok(raw[0]!.includes('"err":{"name":"Error"}'), raw[0]);
    assert.doesNotMatch(raw[0]!, /secret-canary|\/path|stack|message|cause/);
  });

  it('keeps the code of a coded error or a system error, after its name', () => {
    const { logger, lines, raw } = capture();
    logger.error({ err: new ConfigError(CANARY) }, 'start failed');
    logger.error({ err: new StoreGoneError(CANARY) }, 'job store cannot be written');
    logger.error({ err: systemError() }, 'in-flight journal write failed');
    assert.deepEqual(
      lines.map((l) => l['err']),
      [
        { name: 'ConfigError', code: 'SVC_ERR_CONFIG' },
        { name: 'StoreGoneError', code: 'SVC_STORE_GONE' },
        { name: 'Error', code: 'ENOENT' },
      ],
    );
    assert.ok(raw[2]!.includes('"err":{"name":"Error","code":"ENOENT"}'), raw[2]);
    for (const l of raw) assert.doesNotMatch(l, /secret-canary|\/path|nonexistent|stack|errno|syscall/);
  });

  it('writes a thrown value that is not an error (a string, null, an object without a name) safely', () => {
    const { logger, lines, raw } = capture();
    logger.warn({ err: CANARY }, 'a thrown string');
    logger.warn({ err: null }, 'a rejection with null');
    logger.warn({ err: { detail: CANARY } }, 'a thrown object');
    logger.warn({ err: 42 }, 'a thrown number');
    assert.deepEqual(
      lines.map((l) => l['err']),
      [{}, {}, {}, {}],
    );
    for (const l of raw) assert.doesNotMatch(l, /secret-canary/);
    assert.deepEqual(serializeErr(undefined), {});
  });

  it('is inherited by child loggers', () => {
    const { logger, lines, raw } = capture();
    logger
      .child({ component: 'router' })
      .child({ subsystem: 'x' })
      .error({ err: new ConfigError(CANARY) }, 'failed');
    assert.deepEqual(lines[0]!['err'], { name: 'ConfigError', code: 'SVC_ERR_CONFIG' });
    assert.doesNotMatch(raw[0]!, /secret-canary/);
  });

  it('writes the same err member as the objects the call sites built before it, `{ name, code }`', () => {
    const before = (v: unknown): string =>
      JSON.stringify({ err: { name: (v as Error)?.name, code: (v as { code?: unknown })?.code } });
    const plain = pino({ level: 'info' }, { write: (l: string) => void seen.push(l) });
    const seen: string[] = [];
    const { logger, raw } = capture();
    const values: unknown[] = [
      new Error(CANARY),
      new ConfigError(CANARY),
      new StoreGoneError(),
      systemError(),
      new TypeError('x'),
      CANARY,
      null,
      { name: 'N', code: 7 },
    ];
    for (const v of values) {
      plain.warn({ err: { name: (v as Error)?.name, code: (v as { code?: unknown })?.code } }, 'm');
      logger.warn({ err: v }, 'm');
    }
    const errOf = (l: string): string => JSON.stringify({ err: (JSON.parse(l) as { err: unknown }).err });
    assert.deepEqual(raw.map(errOf), seen.map(errOf));
    assert.deepEqual(raw.map(errOf), values.map(before));
  });

  it("is on the process's root logger (createLogger): one line on stdout, no message or stack", () => {
    const logger = fileURLToPath(new URL('../../src/logger.js', import.meta.url));
    const script = `import { createLogger } from ${JSON.stringify(logger)};
      const log = createLogger('svc-serving test', 'info');
      log.child({ component: 'c' }).error({ err: new Error(${JSON.stringify(CANARY)}) }, 'start failed');`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 0, r.stderr);
    const line = JSON.parse(r.stdout.trim()) as Record<string, unknown>;
    assert.deepEqual(line['err'], { name: 'Error' });
    assert.equal(line['msg'], 'start failed');
    assert.doesNotMatch(r.stdout, /secret-canary|\/path|stack/);
  });
});
