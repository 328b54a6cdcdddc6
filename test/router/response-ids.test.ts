import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ModelRoute } from '../../src/config/router-config.js';
import { MAX_RESPONSE_IDS, ResponseIds } from '../../src/router/response-ids.js';
import { StreamObserver } from '../../src/router/stream-observer.js';

const route = (alias: string, ...bases: string[]): ModelRoute =>
  ({
    alias,
    replicas: bases.map((base) => ({ base, origin: base.replace(/\/v1$/, ''), pathPrefix: '/v1' })),
  }) as unknown as ModelRoute;

describe('response ids: where each relayed response was made', () => {
  it('remembers the alias and the replica by base URL; ids of another shape and unknown replicas are not learned', () => {
    const ids = new ResponseIds();
    const pair = route('pair', 'http://a:1/v1', 'http://b:2/v1');
    ids.learn('resp_abc123', pair, 1);
    assert.deepEqual(ids.find('resp_abc123'), { alias: 'pair', base: 'http://b:2/v1' });
    for (const bad of ['abc', 'resp_', 'resp_a/b', 'resp_a?x=1', `resp_${'a'.repeat(201)}`, 'RESP_abc']) {
      ids.learn(bad, pair, 0);
      assert.equal(ids.find(bad), undefined, bad);
    }
    ids.learn('resp_x', pair, 2);
    assert.equal(ids.find('resp_x'), undefined, 'no replica 2');
    assert.equal(ids.size, 1);
  });

  it('is bounded: the id learned longest ago goes first; learning one again makes it the newest', () => {
    const ids = new ResponseIds(3);
    const r = route('a', 'http://a:1/v1');
    for (const id of ['resp_1', 'resp_2', 'resp_3']) ids.learn(id, r, 0);
    ids.learn('resp_1', r, 0);
    ids.learn('resp_4', r, 0);
    assert.equal(ids.find('resp_2'), undefined);
    assert.ok(ids.find('resp_1') && ids.find('resp_3') && ids.find('resp_4'));
    assert.equal(ids.size, 3);
    assert.equal(MAX_RESPONSE_IDS, 10_000);
  });

  it("the observer reads the id from a buffered Response and from a stream's first event that carries the Response", () => {
    const body = new StreamObserver(() => 0, true);
    body.jsonBody(Buffer.from(JSON.stringify({ id: 'resp_b1', status: 'queued', output: [] })), 1);
    assert.equal(body.responseId, 'resp_b1');
    const stream = new StreamObserver(() => 0, true);
    stream.sseChunk(
      Buffer.from(
        'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_s1","status":"in_progress"}}\n\n' +
          'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_other","status":"completed"}}\n\n',
      ),
      1,
    );
    assert.equal(stream.responseId, 'resp_s1');
    const odd = new StreamObserver(() => 0, true);
    odd.jsonBody(Buffer.from(JSON.stringify({ id: '../../admin', status: 'completed' })), 1);
    assert.equal(odd.responseId, null, 'not the shape of a response id');
    const chat = new StreamObserver(() => 0, false);
    chat.jsonBody(Buffer.from(JSON.stringify({ id: 'resp_c', choices: [] })), 1);
    assert.equal(chat.responseId, null, 'only a Responses answer');
  });
});
