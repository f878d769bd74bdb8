// `genfill demo --until <step>`: the story stops after a step and says what to run next.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createTestQueues } from './support/redis.ts';

const db = await createTestDatabase('demo_until');
const env = { DATABASE_URL: db.url, GENFILL_QUEUE_PREFIX: createTestQueues('demo-until').prefix };
const dir = join(mkdtempSync(join(tmpdir(), 'genfill-demo-until-')), 'demo');
beforeEach(() => keepOnFailure(db));

const state = async () => (await db.pool.query(`SELECT state FROM genfill.releases WHERE id = 'order-tax-fix@3'`)).rows[0]?.state;
const count = async (table: string) => (await db.pool.query(`SELECT count(*)::int AS n FROM genfill.${table}`)).rows[0].n;

describe('genfill demo --until', () => {
  it('refuses an unknown step before touching the database', async () => {
    const res = await runCli(['demo', '--rows', '1000', '--dir', dir, '--until', 'rollback'], env);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/--until.*expected one of migrate, seed, adopt, submit, plan, build, reconcile, approve, cutover/);
    const registry = await db.pool.query(`SELECT to_regclass('genfill.releases') AS t`);
    expect(registry.rows[0].t).toBeNull();
  });

  it('stops after plan with the release BUILDING and nothing built, then after build with it BUILT', async () => {
    const planned = await runCli(['demo', '--rows', '1000', '--dir', dir, '--no-throttle', '--until', 'plan'], env);
    expect(planned.code).toBe(0);
    expect(planned.stdout).toMatch(/\[5\/9\] plan/);
    expect(planned.stdout).not.toMatch(/\[6\/9\]/);
    expect(planned.stdout).toMatch(/stopped after plan \(--until plan\); next: genfill worker --release order-tax-fix@3/);
    expect(await state()).toBe('BUILDING');
    expect(await count('receipts')).toBe(0);

    const built = await runCli(['demo', '--rows', '1000', '--dir', dir, '--no-throttle', '--until', 'build', '--json'], env);
    expect(built.code).toBe(0);
    const out = JSON.parse(built.stdout);
    expect(out).toMatchObject({ release: 'order-tax-fix@3', stoppedAfter: 'build', build: { state: 'BUILT' }, receipts: { receipts: 367 } });
    expect(out.reconciliation).toBeUndefined();
    expect(await state()).toBe('BUILT');
    expect(await count('reconciliations')).toBe(0);
  });
});
