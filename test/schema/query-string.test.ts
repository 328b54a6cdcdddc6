import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidInputError } from '../../src/errors.js';
import { MAX_QUERY_LENGTH, splitQuery } from '../../src/schema/query-string.js';

const MEMBERS = ['active', 'history', 'session_id'] as const;

describe('splitQuery: the one strict query-string splitter', () => {
  it('splits, decodes names and values alike, and keeps the order given', () => {
    const cases: [string, [string, string][]][] = [
      ['', []],
      ['active=1', [['active', '1']]],
      ['%61ctive=%31', [['active', '1']]],
      [
        'history=1&session_id=a+b',
        [
          ['history', '1'],
          ['session_id', 'a+b'],
        ],
      ],
      ['session_id=a=b', [['session_id', 'a=b']]],
      ['session_id=a%20b', [['session_id', 'a b']]],
    ];
    for (const [q, want] of cases) assert.deepEqual([...splitQuery(q, MEMBERS)], want, q);
  });

  it('refuses repeated, empty, abbreviated, unknown, differently cased and undecodable members the same way', () => {
    const bad = [
      '&',
      'active=1&',
      '&active=1',
      'active=1&&history=1',
      'active',
      'act',
      'act=1',
      '=1',
      'active=',
      'ACTIVE=1',
      'x=1',
      'active=1&active=1',
      '%61ctive=1&active=1',
      '%zz=1',
      'active=%zz',
      '__proto__=1',
      'constructor=1',
      `session_id=${'s'.repeat(MAX_QUERY_LENGTH)}`,
    ];
    for (const q of bad) assert.throws(() => splitQuery(q, MEMBERS), InvalidInputError, q);
  });

  it('accepts a query of exactly the longest length', () => {
    const q = `session_id=${'s'.repeat(MAX_QUERY_LENGTH - 'session_id='.length)}`;
    assert.equal(splitQuery(q, MEMBERS).get('session_id')?.length, MAX_QUERY_LENGTH - 11);
  });
});
