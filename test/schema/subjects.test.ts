import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidInputError } from '../../src/errors.js';
import { OWNERS, type Owner } from '../../src/schema/enums.js';
import {
  REQUEST_LOOKUPS,
  observationPattern,
  observationSubject,
  parseSubject,
  requestsSubject,
  resyncSubject,
  subjectHost,
  workloadsSubject,
  type RequestLookup,
} from '../../src/schema/subjects.js';

// The wire names are written out here on purpose: this test pins CONTRACT.md's subjects, so
// it must not derive them from the code it checks.
describe('schema/subjects: every NATS subject of the contract, built and parsed in one place', () => {
  it('builds exactly the subjects CONTRACT.md names', () => {
    assert.equal(observationSubject('node-a', 'router'), 'svc.v1.node-a.obs.router');
    assert.equal(observationSubject('n_1', 'manifest'), 'svc.v1.n_1.obs.manifest');
    assert.equal(observationPattern('node-a'), 'svc.v1.node-a.obs.*');
    assert.equal(workloadsSubject('node-a'), 'svc.v1.node-a.workloads');
    assert.equal(resyncSubject('node-a'), 'svc.v1.node-a.resync');
    assert.equal(requestsSubject('node-a', 'get'), 'svc.v1.node-a.requests.get');
    assert.equal(requestsSubject('node-a', 'session'), 'svc.v1.node-a.requests.session');
    assert.equal(requestsSubject('node-a', 'active'), 'svc.v1.node-a.requests.active');
    assert.deepEqual([...REQUEST_LOOKUPS], ['get', 'session', 'active']);
  });

  it('refuses a host outside the host grammar, an unknown owner or lookup', () => {
    const hosts = ['', 'node.a', 'node-a.>', '*', '>', 'node a', '1node', '-a', 'a'.repeat(65), 'nöde'];
    for (const h of hosts) {
      assert.throws(() => observationSubject(h, 'router'), InvalidInputError, h);
      assert.throws(() => observationPattern(h), InvalidInputError, h);
      assert.throws(() => workloadsSubject(h), InvalidInputError, h);
      assert.throws(() => resyncSubject(h), InvalidInputError, h);
      assert.throws(() => requestsSubject(h, 'get'), InvalidInputError, h);
    }
    assert.throws(() => observationSubject('node-a', 'nobody' as Owner), InvalidInputError);
    assert.throws(() => observationSubject('node-a', '*' as Owner), InvalidInputError);
    assert.throws(() => requestsSubject('node-a', 'all' as RequestLookup), InvalidInputError);
  });

  it('parses what it builds, and nothing else', () => {
    for (const owner of OWNERS)
      assert.deepEqual(parseSubject(observationSubject('h', owner)), { kind: 'obs', host: 'h', owner });
    assert.deepEqual(parseSubject(workloadsSubject('node-a')), { kind: 'workloads', host: 'node-a' });
    assert.deepEqual(parseSubject(resyncSubject('node-a')), { kind: 'resync', host: 'node-a' });
    for (const lookup of REQUEST_LOOKUPS)
      assert.deepEqual(parseSubject(requestsSubject('node-a', lookup)), { kind: 'requests', host: 'node-a', lookup });
    const others = [
      '',
      'svc',
      'svc.v1',
      'svc.v1.',
      'svc.v1.node-a',
      'svc.v1.node-a.',
      'svc.v2.node-a.workloads',
      'SVC.v1.node-a.workloads',
      'svc.v1.node-a.obs',
      'svc.v1.node-a.obs.',
      'svc.v1.node-a.obs.*',
      'svc.v1.node-a.obs.nobody',
      'svc.v1.node-a.obs.router.x',
      'svc.v1.node-a.workloads.x',
      'svc.v1.node-a.resync.x',
      'svc.v1.node-a.requests',
      'svc.v1.node-a.requests.all',
      'svc.v1.node-a.requests.get.x',
      'svc.v1.1a.workloads',
      'svc.v1.*.workloads',
      'svc.v1..workloads',
      '_INBOX.x',
      'svc.v1.node-a.trick',
    ];
    for (const s of others) assert.equal(parseSubject(s), undefined, s);
  });

  it('names the host token a subject is under, whatever follows it', () => {
    assert.equal(subjectHost('svc.v1.node-a.obs.router'), 'node-a');
    assert.equal(subjectHost('svc.v1.node-a.anything.else'), 'node-a');
    assert.equal(subjectHost('svc.v1.1bad.x'), '1bad');
    assert.equal(subjectHost('svc.v1.node-a'), undefined);
    assert.equal(subjectHost('svc.v2.node-a.x'), undefined);
    assert.equal(subjectHost('x.svc.v1.node-a.x'), undefined);
  });
});
