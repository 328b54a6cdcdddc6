import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { hasDuplicateKey, refusedJson } from '../../src/schema/json-duplicates.js';

describe('hasDuplicateKey', () => {
  it('finds a member named twice at any depth, also when one spelling uses escapes', () => {
    assert.equal(hasDuplicateKey('{"limit":5,"limit":6}'), true);
    assert.equal(hasDuplicateKey('{"a":{"b":1,"b":2}}'), true);
    assert.equal(hasDuplicateKey('[{"x":1},{"y":[{"z":1, "z" :2}]}]'), true);
    assert.equal(hasDuplicateKey('{"owner":"media","\\u006fwner":"router"}'), true);
    assert.equal(hasDuplicateKey('{"a\\"b":1,"a\\"b":2}'), true);
    assert.equal(hasDuplicateKey('{"a":{"x":{"y":1}},"a":2}'), true, 'the dropped copy held an object');
    assert.equal(hasDuplicateKey('{"__proto__":1,"__proto__":2}'), true);
    const text = '{"a":[{"b":1}, {"b":2,"c":{"b":3}}],"d" : {"e":1,\n"e":2}}';
    assert.equal(hasDuplicateKey(text, JSON.parse(text)), true, 'with the value the caller parsed');
    assert.equal(hasDuplicateKey('{"a":1', undefined), false, 'not JSON: no answer');
  });

  it('refusedJson: a repeated member, or a __proto__ / constructor.prototype member at any depth', () => {
    const verdict = (t: string) => refusedJson(t, JSON.parse(t));
    assert.equal(verdict('{"model":"m","messages":[{"role":"user","content":"x"}]}'), undefined);
    assert.equal(verdict('{"a":1,"a":1}'), 'duplicate');
    assert.equal(verdict('{"__proto__":{"admin":true}}'), 'prototype');
    assert.equal(verdict('{"m":[{"x":{"\\u005f_proto__":{}}}]}'), 'prototype', 'escaped, nested in an array');
    assert.equal(verdict('{"constructor":{"prototype":{"x":1}}}'), 'prototype');
    assert.equal(
      verdict('{"constructor":{"name":"x"},"prototype":1}'),
      undefined,
      'constructor without prototype in it',
    );
    assert.equal(verdict('{"constructor":["prototype"]}'), undefined);
    assert.equal(verdict('{"s":"__proto__","t":"{\\"__proto__\\":1}"}'), undefined, 'in strings');
    assert.equal(({} as Record<string, unknown>)['admin'], undefined, 'nothing was polluted');
  });

  it('does not confuse values, sibling objects or strings that look like JSON with member names', () => {
    assert.equal(hasDuplicateKey('{"a":"a","b":"a"}'), false);
    assert.equal(hasDuplicateKey('[{"a":1},{"a":2}]'), false, 'the same name in two objects');
    assert.equal(hasDuplicateKey('{"a":{"a":{"a":1}}}'), false, 'the same name at different depths');
    assert.equal(hasDuplicateKey('{"s":"{\\"k\\":1,\\"k\\":2}","t":"x:y"}'), false, 'inside a string');
    assert.equal(hasDuplicateKey('{"a":["b","b"],"c":"\\\\"}'), false);
    assert.equal(
      hasDuplicateKey('[' + '['.repeat(50_000) + ']'.repeat(50_000) + ']'),
      false,
      'deep nesting costs no stack',
    );
  });

  it('agrees with a parse that counts names, on generated JSON', () => {
    // JSON.stringify never repeats a name: false. Splicing a copy of the first member in: true.
    fc.assert(
      fc.property(fc.jsonValue(), (v) => {
        const text = JSON.stringify(v);
        if (text === undefined) return;
        assert.equal(hasDuplicateKey(text), false, text);
        const m = /^\{("(?:[^"\\]|\\.)*":(?:-?\d[\d.eE+-]*|"(?:[^"\\]|\\.)*"|true|false|null))/.exec(text);
        if (m) assert.equal(hasDuplicateKey(`{${m[1]},${text.slice(1)}`), true, text);
      }),
      { numRuns: 300 },
    );
  });
});
