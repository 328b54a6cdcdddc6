import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ErrorCode, InvalidArgumentError } from '../../src/errors.js';
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

  it('refuses repeated, empty, abbreviated, unknown, differently cased and undecodable members, naming the member at fault', () => {
    // `query`: the query as a whole, a malformed segment, or a name that is not one of ours
    // (never echoed); else the member itself.
    const bad: [string, string, RegExp][] = [
      ['&', 'query', /name=value/],
      ['active=1&', 'query', /name=value/],
      ['&active=1', 'query', /name=value/],
      ['active=1&&history=1', 'query', /name=value/],
      ['active', 'query', /name=value/],
      ['act', 'query', /name=value/],
      ['=1', 'query', /name=value/],
      ['act=1', 'query', /^must name only active, history, session_id$/],
      ['ACTIVE=1', 'query', /must name only/],
      ['x=1', 'query', /must name only/],
      ['__proto__=1', 'query', /must name only/],
      ['constructor=1', 'query', /must name only/],
      ['%zz=1', 'query', /percent-encoding/],
      ['active=', 'active', /must not be empty/],
      ['active=%zz', 'active', /percent-encoding/],
      ['active=1&active=1', 'active', /at most once/],
      ['%61ctive=1&active=1', 'active', /at most once/],
      ['history=1&session_id=', 'session_id', /must not be empty/],
      [`session_id=${'s'.repeat(MAX_QUERY_LENGTH)}`, 'query', /at most 2048 characters/],
    ];
    for (const [q, name, reason] of bad)
      assert.throws(
        () => splitQuery(q, MEMBERS),
        (e: unknown) => {
          assert.ok(e instanceof InvalidArgumentError, q);
          assert.equal(e.code, ErrorCode.INVALID_INPUT, q);
          assert.equal(e.argument, name, q);
          assert.match(e.reason, reason, q);
          return true;
        },
        q,
      );
  });

  it('accepts a query of exactly the longest length', () => {
    const q = `session_id=${'s'.repeat(MAX_QUERY_LENGTH - 'session_id='.length)}`;
    assert.equal(splitQuery(q, MEMBERS).get('session_id')?.length, MAX_QUERY_LENGTH - 11);
  });
});
