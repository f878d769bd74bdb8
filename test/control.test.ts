// Operator verbs pause, resume, cancel and `status --watch`, against the real Redis and
// PostgreSQL (SPEC "Operator interface", invariant 14: the queue pause mirrors the flag).
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { main } from '@genfill/cli';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('control');
const q = createTestQueues('control');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: q.prefix, GENFILL_LOG_LEVEL: 'silent' };
const cli = (...args: string[]) => runCli(args, env);
const RELEASE = 'orders-g1@1';
const queue = q.queue(RELEASE);

async function flag(): Promise<boolean> {
  const { rows } = await db.pool.query('SELECT operator_paused FROM genfill.releases WHERE id = $1', [RELEASE]);
  return rows[0].operator_paused;
}

async function lastLog(release = RELEASE) {
  const { rows } = await db.pool.query(
    'SELECT action, from_state, to_state, principal, reason FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1',
    [release],
  );
  return rows[0];
}

async function logCount(): Promise<number> {
  return (await db.pool.query('SELECT count(*)::int AS n FROM genfill.release_log')).rows[0].n;
}

function as(role: string): Record<string, string> {
  const u = new URL(db.url);
  u.username = role;
  return { ...env, DATABASE_URL: u.toString() };
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await db.pool.query('GRANT genfill_operator TO genfill_alice');
  await db.pool.query('GRANT SELECT ON public.orders, public.tax_rates TO genfill_operator');
  expect((await cli('release', 'submit', writeRelease(workspace(), firstGenerationRelease()))).code).toBe(0);
  const plan = await cli('plan', RELEASE);
  expect(plan.stderr).toBe('');
  expect(plan.code).toBe(0);
  expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 365 });
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(q);
});

describe('pause and resume', () => {
  it('sets the operator flag, records who and why, and pauses the BullMQ queue', async () => {
    const res = await runCli(['pause', RELEASE, '--reason', 'replica lag at month end'], as('genfill_alice'));
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^paused: orders-g1@1 \(BUILDING\) — no partition starts from now on/);
    expect(res.stdout).toMatch(new RegExp(`queue \\${q.prefix.slice(0, -1)}\\}:release\\.orders-g1@1 paused`));
    expect(await flag()).toBe(true);
    expect(await lastLog()).toEqual({ action: 'pause', from_state: null, to_state: null, principal: 'genfill_alice', reason: 'replica lag at month end' });
    expect(await queue.isPaused()).toBe(true);
  });

  it('treats a second pause as a no-op: exit 0, says so, logs nothing', async () => {
    const before = await logCount();
    const res = await cli('pause', RELEASE);
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^already paused: orders-g1@1 \(BUILDING\) — nothing changed/);
    expect(await logCount()).toBe(before);
    expect(await queue.isPaused()).toBe(true);
  });

  it('has plan re-apply the queue pause from the registry when the queue drifted', async () => {
    await queue.resume();
    expect(await queue.isPaused()).toBe(false);
    const res = await cli('plan', RELEASE, '--json');
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout).dispatch).toMatchObject({ queuePaused: true, enqueue: { added: 0 } });
    expect(await queue.isPaused()).toBe(true);
  });

  it('resumes: clears the flag, logs it and resumes the queue', async () => {
    const res = await cli('resume', RELEASE, '--reason', 'lag is back under budget');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^resumed: orders-g1@1 \(BUILDING\)/);
    expect(await flag()).toBe(false);
    expect(await lastLog()).toMatchObject({ action: 'resume', principal: 'postgres', reason: 'lag is back under budget' });
    expect(await queue.isPaused()).toBe(false);
    const again = await cli('resume', RELEASE, '--json');
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ action: 'resume', changed: false, paused: false });
  });

  it('still sets the flag when Redis is down, warning that the queue pause is re-applied later', async () => {
    const res = await runCli(['pause', RELEASE], { ...env, REDIS_URL: 'redis://127.0.0.1:1' });
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^paused: orders-g1@1/);
    expect(res.stderr).toMatch(/warning: Redis at 127\.0\.0\.1:1 could not be reached .*: the registry flag is set and workers obey it/);
    expect(await flag()).toBe(true);
    expect(await queue.isPaused()).toBe(false);
    // The next plan mirrors the flag.
    expect((await cli('plan', RELEASE)).code).toBe(0);
    expect(await queue.isPaused()).toBe(true);
    expect((await cli('resume', RELEASE)).code).toBe(0);
    expect(await queue.isPaused()).toBe(false);
  });

  it('refuses an unknown release with exit 3', async () => {
    const res = await cli('pause', 'no-such-release');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/release no-such-release does not exist/);
  });
});

describe('cancel and status --watch', () => {
  it('watches progress on a non-terminal line by line and stops when the release is cancelled', async () => {
    let stdout = '';
    let stderr = '';
    let sawProgress!: () => void;
    const firstLine = new Promise<void>((resolve) => (sawProgress = resolve));
    const watching = main(['status', RELEASE, '--watch', '--interval', '0.1'], {
      out: (t) => {
        stdout += t.endsWith('\n') ? t : `${t}\n`;
        if (/partitions built/.test(t)) sawProgress();
      },
      err: (t) => (stderr += t),
      env: { ...env },
      tty: false,
    });
    await firstLine;

    const res = await cli('cancel', RELEASE, '--reason', 'superseded by orders-g1@2');
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^cancelled: orders-g1@1 \(was BUILDING\) — no partition is claimed from now on/);
    expect(res.stdout).toMatch(/removed with 365 jobs/);

    expect(await watching).toBe(0);
    expect(stderr).toBe('');
    expect(stdout).toMatch(/Z orders-g1@1 BUILDING: 0\/365 partitions built \(0\.0%\), 0 running, 0 failed; — rows\/s; ETA —/);
    expect(stdout).toMatch(/orders-g1@1 CANCELLED: 0\/365 partitions built/);
    // It ends with the normal status.
    expect(stdout).toMatch(/state\s+CANCELLED since .*\n[\s\S]*cancel\s+BUILDING → CANCELLED\s+by postgres \(superseded by orders-g1@2\)\s*$/);
  });

  it('leaves no job to deliver and the registry CANCELLED, logged with who and why', async () => {
    expect(await queue.getJobCounts('waiting', 'delayed', 'active', 'prioritized')).toEqual({ waiting: 0, delayed: 0, active: 0, prioritized: 0 });
    expect(await q.keys()).toEqual([]);
    const { rows } = await db.pool.query('SELECT state FROM genfill.releases WHERE id = $1', [RELEASE]);
    expect(rows[0].state).toBe('CANCELLED');
    expect(await lastLog()).toEqual({ action: 'cancel', from_state: 'BUILDING', to_state: 'CANCELLED', principal: 'postgres', reason: 'superseded by orders-g1@2' });
    // No other open release fills its generation: the cancel abandoned it.
    const gen = await db.pool.query(`SELECT state FROM genfill.generations WHERE dataset = 'orders_new' AND generation = 'g1'`);
    expect(gen.rows).toEqual([{ state: 'ABANDONED' }]);
  });

  it('refuses to cancel again (exit 3), and refuses to plan or pause a cancelled release', async () => {
    const again = await cli('cancel', RELEASE);
    expect(again.code).toBe(3);
    expect(again.stderr).toMatch(/release orders-g1@1 is already CANCELLED/);
    const plan = await cli('plan', RELEASE);
    expect(plan.code).toBe(3);
    expect(plan.stderr).toMatch(/is CANCELLED/);
    const pause = await cli('pause', RELEASE);
    expect(pause.code).toBe(3);
    expect(pause.stderr).toMatch(/release orders-g1@1 is CANCELLED: pause applies only to open releases/);
    expect(await q.keys()).toEqual([]);
  });

  it('refuses to cancel a release that is not open (exit 3), naming its state', async () => {
    const r = firstGenerationRelease();
    r.release = 'orders-g1-live@1';
    r.range = { from: '2026-07-01T00:00:00Z', to: '2026-08-01T00:00:00Z' };
    expect((await cli('release', 'submit', writeRelease(workspace(), r))).code).toBe(0);
    // No path to ACTIVE exists yet (cutover is a later verb): a superuser forces the state past
    // the transition-table trigger with session_replication_role, which fires no ordinary trigger.
    await db.pool.query(`BEGIN; SET LOCAL session_replication_role = replica; UPDATE genfill.releases SET state = 'ACTIVE' WHERE id = 'orders-g1-live@1'; COMMIT`);
    const before = await logCount();
    const res = await cli('cancel', 'orders-g1-live@1');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/release orders-g1-live@1 is ACTIVE: only an open release can be cancelled; to undo a cutover use `genfill rollback orders-g1-live@1`/);
    expect(await logCount()).toBe(before);
  });

  it('cancels a DRAFT release and refuses an unknown one with exit 3', async () => {
    const r = firstGenerationRelease();
    r.release = 'orders-g1-draft@1';
    r.range = { from: '2026-09-01T00:00:00Z', to: '2026-10-01T00:00:00Z' };
    expect((await cli('release', 'submit', writeRelease(workspace(), r))).code).toBe(0);
    const res = await cli('cancel', 'orders-g1-draft@1', '--json');
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout)).toMatchObject({ release: 'orders-g1-draft@1', from: 'DRAFT', state: 'CANCELLED', queue: { dropped: 0 } });
    const unknown = await cli('cancel', 'no-such-release');
    expect(unknown.code).toBe(3);
    expect(unknown.stderr).toMatch(/release no-such-release does not exist/);
  });
});
