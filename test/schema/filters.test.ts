import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ErrorCode, SvcError } from '../../src/errors.js';

/** Every refusal of a filter is the invalid-input error (naming the filter where it can). */
const invalidInput = (e: unknown): boolean => e instanceof SvcError && e.code === ErrorCode.INVALID_INPUT;
import { parseFilterArgs, parseFilterQuery, resolveFilters } from '../../src/schema/filters.js';

describe('filters - raw query string', () => {
  it('accepts every filter once with canonical values', () => {
    const f = parseFilterQuery(
      'owner=router&kind=router-request&state=streaming&host=node-a&active_only=true&recent_seconds=60&limit=5',
    );
    assert.deepEqual(
      { ...f },
      {
        owner: 'router',
        kind: 'router-request',
        state: 'streaming',
        host: 'node-a',
        active_only: true,
        recent_seconds: 60,
        limit: 5,
      },
    );
  });
  it('an empty query means defaults', () => {
    assert.deepEqual(resolveFilters(parseFilterQuery('')), { active_only: false, recent_seconds: 3600, limit: 200 });
  });
  const bad: [string, string][] = [
    ['repeated', 'owner=router&owner=media'],
    ['unknown member', 'ownr=router'],
    ['abbreviated name', 'own=router'],
    ['bare word', 'act'],
    ['empty value', 'owner='],
    ['empty segment', 'owner=router&&limit=3'],
    ['trailing ampersand', 'limit=3&'],
    ['differently cased name', 'Owner=router'],
    ['differently cased value', 'owner=Router'],
    ['boolean spelled 1', 'active_only=1'],
    ['boolean cased', 'active_only=True'],
    ['null value', 'owner=null'],
    ['negative', 'limit=-1'],
    ['plus sign', 'limit=+5'],
    ['hex', 'limit=0x10'],
    ['decimal point', 'limit=5.0'],
    ['exponent', 'limit=1e2'],
    ['leading zero', 'limit=010'],
    ['limit zero', 'limit=0'],
    ['limit over', 'limit=1001'],
    ['recent zero', 'recent_seconds=0'],
    ['recent over', 'recent_seconds=86401'],
    ['host grammar', 'host=1node'],
    ['host too long', 'host=' + 'a'.repeat(65)],
    ['bad percent encoding', 'owner=%E0%A4%A'],
    ['abbreviated state', 'state=stream'],
  ];
  for (const [name, q] of bad) {
    it(`rejects ${name}`, () => assert.throws(() => parseFilterQuery(q), invalidInput));
  }
  it('the error names no operand', () => {
    try {
      parseFilterQuery('owner=SECRET-CANARY');
      assert.fail('accepted');
    } catch (err) {
      assert.ok(invalidInput(err));
      assert.doesNotMatch(String((err as Error).message) + JSON.stringify(err), /CANARY/);
    }
  });
  it('accepts the bounds themselves', () => {
    assert.equal(parseFilterQuery('limit=1000').limit, 1000);
    assert.equal(parseFilterQuery('limit=1').limit, 1);
    assert.equal(parseFilterQuery('recent_seconds=86400').recent_seconds, 86400);
    assert.equal(parseFilterQuery('host=' + 'a'.repeat(64)).host, 'a'.repeat(64));
  });
});

describe('filters - arguments object', () => {
  it('accepts typed present members', () => {
    assert.deepEqual(
      { ...parseFilterArgs({ owner: 'media', active_only: false, limit: 10 }) },
      { owner: 'media', active_only: false, limit: 10 },
    );
  });
  it('absent arguments are no filters', () => assert.deepEqual(parseFilterArgs(undefined), {}));
  const bad: [string, unknown][] = [
    ['null arguments', null],
    ['array arguments', ['owner']],
    ['string arguments', 'owner=router'],
    ['null member', { owner: null }],
    ['unknown member', { owners: 'router' }],
    ['boolean as string', { active_only: 'true' }],
    ['integer as string', { limit: '5' }],
    ['fractional', { limit: 2.5 }],
    ['out of range', { recent_seconds: 100000 }],
    ['NaN-like', { limit: Number.NaN }],
    ['prototype key', JSON.parse('{"__proto__": {"limit": 5}}')],
    ['bad host', { host: 'node a' }],
  ];
  for (const [name, v] of bad) {
    it(`rejects ${name}`, () => assert.throws(() => parseFilterArgs(v), invalidInput));
  }
});
