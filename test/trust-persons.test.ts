// One person, one identity (issue 28, finding 4; SPEC "Identity and roles", "People, not
// principals"). Approvals count the persons the owner maps principals to — database logins and
// API token subjects — not the principals themselves. Reproduced as plain logins and through an
// API logged in as a plain genfill_api login: a person approving over psql and again through a
// token under the same name, and a submitter approving through an approver token under another
// subject, are both refused with nothing changed; an unmapped approver is refused with the SQL
// that maps it; a second, mapped person approves.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type ApiServer } from '@genfill/api';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { builtRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { login, mapPerson, token } from './support/persons.ts';
import { createTestQueues, REDIS_URL } from './support/redis.ts';

const tdb = await createTestDatabase('trust_persons');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'trust-persons-test', 6);
const log = createLogger('trust-persons-test', 'silent');
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-02T00:00:00Z';
const REL = 'persons@1';

/** Plain logins (cluster-wide, created idempotently): a submitter, three approvers, the API. */
const LOGINS = {
  genfill_h6_sub: 'genfill_operator',
  genfill_h6_alice: 'genfill_approver',
  genfill_h6_bob: 'genfill_approver',
  genfill_h6_carol: 'genfill_approver',
  genfill_h6_anon: 'genfill_operator',
  genfill_h6_papi: 'genfill_api',
} as const;
type Login = keyof typeof LOGINS;

/** Token subjects: alice's token carries her login's name; the submitter holds an approver token as "reviewer-s". */
const TOKENS = { alice: 'h6-alice-approver-token-0123456789', sub: 'h6-sub-approver-token-0123456789' };

const clients: pg.Client[] = [];
async function connectAs(who: Login): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: urlAs(tdb, who) });
  c.on('error', () => undefined);
  await c.connect();
  clients.push(c);
  return c;
}

let submitter: Db;
let api: ApiServer;
let reconciliation: number;

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await tdb.pool.query(q, v)).rows[0] as T;
/** What an approval could have changed: the approvals, the release's state, the approve log lines. */
const evidence = () =>
  one<{ approvals: number; state: string; logs: number }>(
    `SELECT (SELECT count(*)::int FROM genfill.approvals WHERE release = $1) AS approvals,
            (SELECT state FROM genfill.releases WHERE id = $1) AS state,
            (SELECT count(*)::int FROM genfill.release_log WHERE release = $1 AND action = 'approve') AS logs`,
    [REL],
  );
const approveOverApi = (bearer: string) =>
  fetch(`${api.url}/releases/${encodeURIComponent(REL)}/approve`, {
    method: 'POST',
    headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
    body: JSON.stringify({ reconciliation }),
  });

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 2, perDay: 48 });
  for (const [name, role] of Object.entries(LOGINS)) {
    await tdb.pool.query(`DO $$ BEGIN CREATE ROLE ${name} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await tdb.pool.query(`GRANT ${role} TO ${name}`);
  }
  await tdb.pool.query('GRANT SELECT ON public.orders, public.tax_rates TO genfill_operator');
  // The owner's mapping. alice's login and her token are one person; the submitter's login and
  // the approver token they hold as "reviewer-s" are one person; bob is another; carol is not mapped.
  await mapPerson(tdb.pool, 'alice', login('genfill_h6_alice'), token('genfill_h6_alice'));
  await mapPerson(tdb.pool, 'sam', login('genfill_h6_sub'), token('reviewer-s'));
  await mapPerson(tdb.pool, 'bob', login('genfill_h6_bob'));

  submitter = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_h6_sub') } as never, 'h6-sub', 2);
  await builtRelease(db, { id: REL, generation: 'g3', from: FROM, to: TO, approvals: 2, submitAs: submitter });
  const r = await reconcile(db, REL);
  expect(r.state).toBe('RECONCILED');
  reconciliation = Number(r.id);
  api = await startApi({
    config: loadConfig({
      DATABASE_URL: urlAs(tdb, 'genfill_h6_papi'),
      REDIS_URL,
      GENFILL_QUEUE_PREFIX: createTestQueues('trust-persons').prefix,
      GENFILL_API_TOKENS: `genfill_h6_alice:approver:${TOKENS.alice},reviewer-s:approver:${TOKENS.sub}`,
    }),
    log,
    port: 0,
  });
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await api?.close();
  for (const c of clients) await c.end().catch(() => undefined);
  await submitter?.end();
  await db.end();
});

describe('one person, one identity', () => {
  it('records the submitter as the login that submitted, and the person of an approval beside its principal', async () => {
    expect(await one(`SELECT submitted_by, submitted_kind FROM genfill.releases WHERE id = $1`, [REL])).toEqual({
      submitted_by: 'genfill_h6_sub',
      submitted_kind: 'login',
    });
    const alice = await connectAs('genfill_h6_alice');
    const r = (await alice.query('SELECT * FROM genfill.approve($1, $2)', [REL, reconciliation])).rows[0];
    expect(r).toMatchObject({ outcome: 'recorded', approvals: 1, required: 2, state: 'RECONCILED', principal: 'genfill_h6_alice' });
    expect((await tdb.pool.query(`SELECT principal, principal_kind, person FROM genfill.approvals WHERE release = $1`, [REL])).rows).toEqual([
      { principal: 'genfill_h6_alice', principal_kind: 'login', person: 'alice' },
    ]);
  });

  it('refuses a second approval by the same person through an API token named like her login, changing nothing', async () => {
    const before = await evidence();
    expect(before).toEqual({ approvals: 1, state: 'RECONCILED', logs: 1 });
    const res = await approveOverApi(TOKENS.alice);
    expect(res.status).toBe(409);
    const body = (await res.json()) as { error: string; message: string };
    expect(body.error).toBe('PersonAlreadyApprovedError');
    expect(body.message).toMatch(/person alice already approved release persons@1 .* as the login genfill_h6_alice: one person approves once/);
    expect(await evidence()).toEqual(before);
  });

  it('refuses the submitter approving through an approver token under another subject, changing nothing', async () => {
    const before = await evidence();
    const res = await approveOverApi(TOKENS.sub);
    expect(res.status).toBe(409);
    const body = (await res.json()) as { error: string; message: string };
    expect(body.error).toBe('SubmitterApprovalError');
    expect(body.message).toMatch(/submitted by sam \(the login genfill_h6_sub\), and you are sam as the token reviewer-s: the submitter cannot approve it under any principal/);
    expect(await evidence()).toEqual(before);
  });

  it('refuses an approver whose login maps to no person, quoting the SQL the owner runs to map it, changing nothing', async () => {
    const before = await evidence();
    const carol = await connectAs('genfill_h6_carol');
    const err = await carol.query('SELECT * FROM genfill.approve($1, $2)', [REL, reconciliation]).then(
      () => null,
      (e: pg.DatabaseError) => e,
    );
    expect(err?.code).toBe('GFM01');
    expect(err?.message).toMatch(/the login genfill_h6_carol maps to no person/);
    expect(err?.message).toContain(
      `INSERT INTO genfill.principal_persons (principal, kind, person) VALUES ('genfill_h6_carol', 'login', 'genfill_h6_carol')`,
    );
    expect(await evidence()).toEqual(before);
  });

  it('refuses every write to the mapping from people and the fleet', async () => {
    for (const who of ['genfill_h6_carol', 'genfill_h6_sub', 'genfill_h6_papi'] as const) {
      const c = await connectAs(who);
      await expect(c.query(`INSERT INTO genfill.persons (person) VALUES ('mallory')`)).rejects.toThrow(/permission denied/);
      await expect(c.query(`INSERT INTO genfill.principal_persons (principal, kind, person) VALUES ('${who}', 'login', 'bob')`)).rejects.toThrow(/permission denied/);
      await expect(c.query(`UPDATE genfill.principal_persons SET person = 'bob' WHERE principal = 'genfill_h6_sub'`)).rejects.toThrow(/permission denied/);
    }
    expect(await one(`SELECT count(*)::int AS n FROM genfill.principal_persons`)).toEqual({ n: 3 + 5 });
  });

  it('refuses every approval of a release whose submitter maps to no person, naming the SQL that maps the submitter, changing nothing', async () => {
    const other = 'persons-anon@1';
    const anon = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_h6_anon') } as never, 'h6-anon', 1);
    try {
      await builtRelease(db, { id: other, generation: 'g4', from: FROM, to: TO, submitAs: anon });
    } finally {
      await anon.end();
    }
    const r = await reconcile(db, other);
    const bob = await connectAs('genfill_h6_bob');
    const err = await bob.query('SELECT * FROM genfill.approve($1, $2)', [other, r.id]).then(
      () => null,
      (e: pg.DatabaseError) => e,
    );
    expect(err?.code).toBe('GFM01');
    expect(err?.message).toMatch(/release persons-anon@1 was submitted by the login genfill_h6_anon, which maps to no person/);
    expect(err?.message).toContain(`VALUES ('genfill_h6_anon', 'login', 'genfill_h6_anon')`);
    expect(await one(`SELECT state, (SELECT count(*)::int FROM genfill.approvals WHERE release = $1) AS approvals FROM genfill.releases WHERE id = $1`, [other])).toEqual({
      state: 'RECONCILED',
      approvals: 0,
    });
  });

  it('approves when a second, mapped person approves: two persons, two approvals', async () => {
    const bob = await connectAs('genfill_h6_bob');
    const r = (await bob.query('SELECT * FROM genfill.approve($1, $2)', [REL, reconciliation])).rows[0];
    expect(r).toMatchObject({ outcome: 'approved', approvals: 2, required: 2, state: 'APPROVED', principal: 'genfill_h6_bob' });
    expect(await evidence()).toEqual({ approvals: 2, state: 'APPROVED', logs: 2 });
    expect((await tdb.pool.query(`SELECT principal, principal_kind, person FROM genfill.approvals WHERE release = $1 ORDER BY id`, [REL])).rows).toEqual([
      { principal: 'genfill_h6_alice', principal_kind: 'login', person: 'alice' },
      { principal: 'genfill_h6_bob', principal_kind: 'login', person: 'bob' },
    ]);
    expect(await one(`SELECT ok, detail FROM genfill.cutover_preconditions($1) WHERE name = 'approvals'`, [REL])).toMatchObject({ ok: true });
  });
});
