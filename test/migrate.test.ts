// Numbered add-only migrations under an advisory lock; a newer database is refused.
import pg from 'pg';
import { beforeEach, describe, expect, it } from 'vitest';
import { REQUEST_KIND_NAMES, serviceOf } from '@genfill/contracts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from './support/fixtures.ts';

const db = await createTestDatabase('migrate');
const env = { DATABASE_URL: db.url };
beforeEach(() => keepOnFailure(db));

describe('genfill migrate', () => {
  it('refuses every other command before the registry exists, saying to migrate', async () => {
    const res = await runCli(['status'], env);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/run `genfill migrate` first/);
  });

  it('applies every migration once when two runs race, the second doing nothing', async () => {
    const [a, b] = await Promise.all([runCli(['migrate', '--json'], env), runCli(['migrate', '--json'], env)]);
    expect([a.code, b.code]).toEqual([0, 0]);
    const applied = [JSON.parse(a.stdout).applied.length, JSON.parse(b.stdout).applied.length].sort();
    expect(applied[0]).toBe(0);
    expect(applied[1]).toBeGreaterThanOrEqual(2);
    const { rows } = await db.pool.query('SELECT version, applied_by FROM genfill.migrations ORDER BY version');
    expect(rows.map((r) => r.version)).toEqual(Array.from({ length: applied[1]! }, (_, i) => i + 1));
    expect(rows[0].applied_by).toBe('postgres');
    const again = await runCli(['migrate'], env);
    expect(again.stdout).toMatch(/registry schema is current/);
  });

  it('keeps genfill.request_kinds equal to the code\'s kinds: migrate restores it, every other command refuses a drifted one', async () => {
    const kinds = async () => (await db.pool.query('SELECT kind, service FROM genfill.request_kinds ORDER BY kind')).rows;
    const code = [...REQUEST_KIND_NAMES].sort().map((kind) => ({ kind, service: serviceOf(kind) }));
    expect(await kinds()).toEqual(code);

    await db.pool.query(`DELETE FROM genfill.request_kinds WHERE kind = 'catchup'`);
    await db.pool.query(`UPDATE genfill.request_kinds SET service = 'planner' WHERE kind = 'seal'`);
    await db.pool.query(`INSERT INTO genfill.request_kinds (kind, service) VALUES ('defrag', 'planner')`);
    const refused = await runCli(['status'], env);
    expect(refused.code).toBe(3);
    expect(refused.stderr).toMatch(/request kinds are not this genfill's \(\+catchup, -defrag, ~seal\): run `genfill migrate`/);

    const fixed = await runCli(['migrate', '--json'], env);
    expect(fixed.code).toBe(0);
    expect(JSON.parse(fixed.stdout).requestKinds).toEqual(['+catchup', '-defrag', '~seal']);
    expect(await kinds()).toEqual(code);
    expect(JSON.parse((await runCli(['migrate', '--json'], env)).stdout).requestKinds).toEqual([]);

    // genfill.request takes only those kinds, and arguments that are a JSON object: bad input, nothing written.
    await expect(db.pool.query(`SELECT genfill.request('defrag', 'orders-g1@1', '{}')`)).rejects.toMatchObject({ code: '22023', message: /unknown request kind defrag: the kinds are catchup, cutover/ });
    await expect(db.pool.query(`SELECT genfill.request('plan', 'orders-g1@1', '[1]')`)).rejects.toMatchObject({ code: '22023', message: /a JSON object, not array/ });
    await expect(db.pool.query(`INSERT INTO genfill.requests (kind, release) VALUES ('defrag', 'orders-g1@1')`)).rejects.toMatchObject({ code: '23503' });
  });

  it('keeps the release log append-only', async () => {
    await createExampleSchema(db.pool);
    expect((await runCli(['release', 'submit', writeRelease(workspace(), firstGenerationRelease())], env)).code).toBe(0);
    await expect(db.pool.query(`UPDATE genfill.release_log SET principal = 'someone-else'`)).rejects.toThrow(/append-only/);
    await expect(db.pool.query('DELETE FROM genfill.release_log')).rejects.toThrow(/append-only/);
  });

  it('records the principal as the connected login role, not a flag', async () => {
    const url = new URL(db.url);
    url.username = 'genfill_alice';
    const alice = new pg.Client({ connectionString: url.toString() });
    await db.pool.query('GRANT USAGE ON SCHEMA genfill TO genfill_alice; GRANT SELECT, UPDATE ON genfill.releases TO genfill_alice; GRANT INSERT ON genfill.release_log TO genfill_alice; GRANT USAGE ON SEQUENCE genfill.release_log_id_seq TO genfill_alice');
    await alice.connect();
    try {
      await alice.query(`INSERT INTO genfill.release_log (release, action) VALUES ('orders-g1@1', 'note')`);
    } finally {
      await alice.end();
    }
    const { rows } = await db.pool.query(`SELECT principal FROM genfill.release_log WHERE action = 'note'`);
    expect(rows).toEqual([{ principal: 'genfill_alice' }]);
  });

  it('refuses every command, migrate included, against a schema newer than the code', async () => {
    await db.pool.query(`INSERT INTO genfill.migrations (version, name, sha256) VALUES (999, '0999_future', 'x')`);
    try {
      for (const args of [['status'], ['plan', 'orders-g1@1'], ['migrate']]) {
        const res = await runCli(args, env);
        expect(res.code).toBe(3);
        expect(res.stderr).toMatch(/schema is at version 999, newer than this genfill knows/);
      }
    } finally {
      await db.pool.query('DELETE FROM genfill.migrations WHERE version = 999');
    }
  });

  it('refuses to run when a landed migration was edited', async () => {
    await db.pool.query(`UPDATE genfill.migrations SET sha256 = 'edited' WHERE version = 1`);
    const res = await runCli(['migrate'], env);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/migration 0001_registry was changed after it was applied/);
  });
});
