// The seal (SPEC invariant 7): a projector commit racing the seal either lands inside the
// barrier B or writes nothing; a stream of batches cannot starve the seal; B contains every
// build watermark; unseal reopens ingress under a new epoch.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi } from '@genfill/api';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { projectDataset, runBatch, runProjectorService } from '@genfill/projector';
import { createPool } from '@genfill/registry';
import { builtRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { createTestQueues, REDIS_URL } from './support/redis.ts';
import { sealRelease, switchExtension, unsealRelease } from '@genfill/switch';

const tdb = await createTestDatabase('seal');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'seal-test', 10);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('seal-test', 'silent');
const DS = 'orders_enriched';

const drain = (id = 'seal-test') => projectDataset(DS, { db, log, untilIdle: true, id, leaseMs: 60_000 });
const frontier = async () => (await db.query(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = $1`, [DS])).rows[0].s as string;
const dataset = async () => (await db.query(`SELECT ingress_state, ingress_epoch::int AS epoch FROM genfill.datasets WHERE name = $1`, [DS])).rows[0];
const state = async (id: string) => (await db.query(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).rows[0].state as string;

async function lease(holder: string) {
  const { rows } = await db.query(`SELECT genfill.projector_acquire($1, $2, 60000)::text AS t`, [DS, holder]);
  return { holder, token: BigInt(rows[0].t) };
}

/** A seal attempt is waiting for the seal lock (its table in genfill_lock, not granted in EXCLUSIVE mode). */
async function sealWaiting(): Promise<boolean> {
  const { rows } = await db.query(
    `SELECT count(*)::int AS n FROM pg_locks
      WHERE locktype = 'relation' AND relation = to_regclass(format('genfill_lock.%I', genfill.lock_relation_name('seal', $1)))
        AND NOT granted AND mode = 'ExclusiveLock'`,
    [DS],
  );
  return rows[0].n > 0;
}

async function until(fn: () => Promise<boolean>, ms = 10_000) {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 3, perDay: 48 });
  await builtRelease(db, { id: 'fix@1', generation: 'g3', from: '2025-07-01T00:00:00Z', to: '2025-07-03T00:00:00Z' });
});
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('preconditions', () => {
  it('refuses (exit 3) while the projector has not passed the build watermarks, naming the lag, and seals nothing', async () => {
    const res = await runCli(['seal', 'fix@1', '--wait', '1'], env);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/does not yet contain the watermarks of 2 partitions.*the projector is behind/);
    expect(await dataset()).toEqual({ ingress_state: 'OPEN', epoch: 1 });
    expect(await state('fix@1')).toBe('BUILT');
  });

  it('refuses a release that is not built, or a dataset without the generation it expects', async () => {
    const res = await runCli(['seal', 'nope@1'], env);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/release nope@1 does not exist/);
  });
});

describe('FOR KEY SHARE would not fence (why the tail takes FOR SHARE)', () => {
  it('a REPEATABLE READ batch reads the dataset row FOR KEY SHARE after the seal committed and sees it OPEN', async () => {
    const batch = new pg.Client({ connectionString: tdb.url });
    await batch.connect();
    try {
      await batch.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await batch.query('SELECT pg_current_snapshot()');
      await db.query(`UPDATE genfill.datasets SET ingress_state = 'SEALED' WHERE name = $1`, [DS]);
      const weak = await batch.query(`SELECT ingress_state FROM genfill.datasets WHERE name = $1 FOR KEY SHARE`, [DS]);
      expect(weak.rows[0].ingress_state).toBe('OPEN'); // not fenced: it would write
      await expect(batch.query(`SELECT ingress_state FROM genfill.datasets WHERE name = $1 FOR SHARE`, [DS])).rejects.toMatchObject({ code: '40001' });
    } finally {
      await batch.query('ROLLBACK').catch(() => undefined);
      await batch.end();
      await db.query(`UPDATE genfill.datasets SET ingress_state = 'OPEN' WHERE name = $1`, [DS]);
    }
  });
});

describe('a batch racing the seal', () => {
  it('holding the shared lock when the seal starts: the seal waits and the batch lands inside B', async () => {
    await drain();
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 5`);
    // A long source transaction, open across the seal.
    const long = new pg.Client({ connectionString: tdb.url });
    await long.connect();
    await long.query('BEGIN');
    await long.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 9`);
    let release!: () => void;
    const hold = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const batch = runBatch(db, DS, {
      lease: await lease('seal-test'),
      maxEvents: 1000,
      statementTimeoutMs: 30_000,
      afterSharedLock: async () => {
        locked();
        await hold;
      },
    });
    await isLocked;
    const seal = sealRelease(db, 'fix@1', { lockTimeoutMs: 20_000, lockAttempts: 1 });
    await until(sealWaiting);
    release();
    const b = await batch;
    expect(b.kind).toBe('applied');
    const s = await seal;
    await long.query('COMMIT');
    await long.end();
    expect(b.kind === 'applied' && b.to).toBe(s.barrier);
    const { rows: late } = await db.query(
      `SELECT pg_visible_in_snapshot(txid, $1::pg_snapshot) AS in_b FROM genfill.change_log WHERE key = '{"order_id": 9}'`,
      [s.barrier],
    );
    expect(late).toEqual([{ in_b: false }]);
    expect(await frontier()).toBe(s.barrier);
    expect(await dataset()).toEqual({ ingress_state: 'SEALED', epoch: 1 });
    expect(await state('fix@1')).toBe('INGRESS_SEALED');
    const { rows } = await db.query(`SELECT epoch::int, release, sealed_from, barrier::text, sealed_by FROM genfill.epochs WHERE dataset = $1 AND epoch = 1`, [DS]);
    expect(rows[0]).toEqual({ epoch: 1, release: 'fix@1', sealed_from: 'BUILT', barrier: s.barrier, sealed_by: 'postgres' });
  });

  it('one release per dataset is sealed at a time', async () => {
    const res = await runCli(['seal', 'fix@1'], env);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/is INGRESS_SEALED/);
  });

  it('while sealed the projector writes nothing and events wait in the log; a long transaction open across the seal is not in B', async () => {
    const b = await frontier();
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 6`);
    const t = await drain();
    expect(t.last?.kind).toBe('sealed');
    expect(await frontier()).toBe(b);
    const { rows } = await db.query(
      `SELECT count(*)::int AS n FROM genfill.change_log WHERE source_table = 'public.orders' AND NOT pg_visible_in_snapshot(txid, $1::pg_snapshot)`,
      [b],
    );
    expect(rows[0].n).toBe(2); // order 6, and order 9 of the transaction open across the seal
  });

  it('unseal reopens ingress under epoch 2, the release returns to BUILT, and the projector catches up', async () => {
    const res = await runCli(['unseal', 'fix@1', '--reason', 'test'], env);
    expect(res.stderr).toBe('');
    expect(res.stdout).toMatch(/ingress open under epoch 2; fix@1 is BUILT again/);
    expect(await dataset()).toEqual({ ingress_state: 'OPEN', epoch: 2 });
    expect(await state('fix@1')).toBe('BUILT');
    const t = await drain();
    expect(t.events).toBe(2);
    const { rows } = await db.query(`SELECT epoch::int, closed_at IS NOT NULL AS closed, opened_for FROM genfill.epochs WHERE dataset = $1 ORDER BY epoch`, [DS]);
    expect(rows).toEqual([
      { epoch: 1, closed: true, opened_for: 'adopt' },
      { epoch: 2, closed: false, opened_for: 'unseal of fix@1' },
    ]);
  });

  it('a batch whose snapshot predates the seal and whose tail comes after writes nothing', async () => {
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 7`);
    let go!: () => void;
    const wait = new Promise<void>((r) => (go = r));
    let applied!: () => void;
    const atTail = new Promise<void>((r) => (applied = r));
    const batch = runBatch(db, DS, {
      lease: await lease('seal-test'),
      maxEvents: 1000,
      statementTimeoutMs: 30_000,
      beforeTail: async () => {
        applied();
        await wait;
      },
    });
    await atTail;
    const before = await frontier();
    const s = await sealRelease(db, 'fix@1', { lockTimeoutMs: 5000 });
    expect(s.barrier).toBe(before);
    go();
    const b = await batch;
    expect(b.kind).toBe('fenced');
    expect(await frontier()).toBe(before);
    const { rows } = await db.query(`SELECT g.amount_cents = o.amount_cents AS same FROM genfill_data."orders_enriched__g2" g, public.orders o WHERE g.order_id = 7 AND o.order_id = 7`);
    expect(rows[0].same).toBe(false);
    await unsealRelease(db, 'fix@1', 'next test');
  });

  it('a stream of batches holding the shared lock back to back cannot starve the seal', async () => {
    await drain();
    let stop = false;
    const holders = [0, 1, 2].map(async () => {
      const c = new pg.Client({ connectionString: tdb.url });
      await c.connect();
      try {
        while (!stop) {
          await c.query('BEGIN');
          await c.query(`SELECT genfill.take_lock('seal', $1, 'shared')`, [DS]);
          await c.query('SELECT pg_sleep(0.03)');
          await c.query('COMMIT');
        }
      } finally {
        await c.end();
      }
    });
    await new Promise((r) => setTimeout(r, 100));
    try {
      const s = await sealRelease(db, 'fix@1', { lockTimeoutMs: 1000, lockAttempts: 1 });
      expect(s.epoch).toBe(3);
      expect(s.lockWaitMs).toBeLessThan(1000);
    } finally {
      stop = true;
      await Promise.all(holders);
    }
    await unsealRelease(db, 'fix@1', 'next test');
  });

  it('a held seal lock fails the seal with exit 3 naming the holder pid, after its retries', async () => {
    const holder = new pg.Client({ connectionString: tdb.url, application_name: 'stuck-session' });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT genfill.take_lock('seal', $1, 'shared')`, [DS]);
      const pid = (await holder.query('SELECT pg_backend_pid() AS p')).rows[0].p;
      await expect(sealRelease(db, 'fix@1', { lockTimeoutMs: 100, lockAttempts: 2 })).rejects.toThrow(new RegExp(`held by pid ${pid} \\(RowShareLock, stuck-session`));
      expect(await dataset()).toMatchObject({ ingress_state: 'OPEN' });
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
  });
});

describe('seal as a person', () => {
  it('an operator\'s seal is a request the projector service runs, recorded under the operator', async () => {
    await db.query('GRANT genfill_operator TO genfill_alice');
    const controller = new AbortController();
    const service = runProjectorService({ config: { DATABASE_URL: tdb.url } as never, db, log, signal: controller.signal, extension: switchExtension(), pollMs: 50 });
    try {
      const res = await runCli(['seal', 'fix@1', '--json'], { DATABASE_URL: urlAs(tdb, 'genfill_alice') });
      expect(res.code).toBe(0);
      const r = JSON.parse(res.stdout);
      expect(r).toMatchObject({ release: 'fix@1', dataset: DS, epoch: 4 });
      const { rows } = await db.query(`SELECT sealed_by FROM genfill.epochs WHERE dataset = $1 AND epoch = 4`, [DS]);
      expect(rows[0].sealed_by).toBe('genfill_alice');
      const un = await runCli(['unseal', 'fix@1', '--reason', 'done'], { DATABASE_URL: urlAs(tdb, 'genfill_alice') });
      expect(un.code).toBe(0);
      // The projector service applies again under epoch 5.
      await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 8`);
      await until(async () => {
        const { rows: g } = await db.query(`SELECT g.amount_cents = o.amount_cents AS same FROM genfill_data."orders_enriched__g2" g, public.orders o WHERE g.order_id = 8 AND o.order_id = 8`);
        return g[0].same;
      });

      // Over HTTP: the same requests, as the token's subject.
      const token = 'operator-token-seal-0123456789';
      const api = await startApi({
        config: loadConfig({ DATABASE_URL: tdb.url, REDIS_URL, GENFILL_QUEUE_PREFIX: createTestQueues('seal').prefix, GENFILL_API_TOKENS: `olga:operator:${token}` }),
        log,
        port: 0,
      });
      try {
        const post = (path: string, body: unknown = {}) =>
          fetch(`${api.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
        const sealed = await post('/releases/fix@1/seal');
        expect(sealed.status).toBe(200);
        expect(await sealed.json()).toMatchObject({ principal: 'olga', release: 'fix@1', epoch: 5 });
        expect((await db.query(`SELECT sealed_by FROM genfill.epochs WHERE dataset = $1 AND epoch = 5`, [DS])).rows[0].sealed_by).toBe('olga');
        const again = await post('/releases/fix@1/seal');
        expect(again.status).toBe(409);
        // The service also caught the candidate up to the barrier on its own: CAUGHT_UP.
        await until(async () => (await state('fix@1')) === 'CAUGHT_UP');
        // The projector's refusal keeps its class over HTTP (it was a RequestFailedError before errors crossed processes typed).
        expect(await again.json()).toMatchObject({ error: 'RefusedError', message: expect.stringMatching(/is (INGRESS_SEALED|CAUGHT_UP)/), request: expect.any(String) });
        expect((await post('/releases/fix@1/unseal')).status).toBe(400);
        const unsealed = await post('/releases/fix@1/unseal', { reason: 'http test' });
        expect(unsealed.status).toBe(200);
        expect(await unsealed.json()).toMatchObject({ epoch: 6, state: 'BUILT' });
      } finally {
        await api.close();
      }
    } finally {
      controller.abort();
      await service;
    }
  });
});
