// The throttle controller's election and fence with real worker processes: a SIGKILLed
// controller is replaced within one lease period, and a SIGSTOPped one that wakes up after its
// lease expired has its next decision refused by the Postgres fence.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { waitFor as waitUntil } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const db = await createTestDatabase('throttle_lease');
const queues = createTestQueues('throttle-lease');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: queues.prefix, GENFILL_LOG_LEVEL: 'warn' };
const cli = (...args: string[]) => runCli(args, env);
const children = new Set<ChildProcess>();
const INTERVAL_MS = 300;
// The worker's default: three intervals.
const LEASE_MS = 3 * INTERVAL_MS;
const RELEASE = 'lease@1';

interface Worker {
  child: ChildProcess;
  stderr: () => string;
}

function worker(): Worker {
  const child = spawn(process.execPath, [BIN, 'worker', '--release', RELEASE, '--throttle-interval', String(INTERVAL_MS)], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  children.add(child);
  child.on('exit', () => children.delete(child));
  return { child, stderr: () => err };
}

const waitFor = <T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 20_000) => waitUntil(what, probe, timeoutMs, { intervalMs: 20 });

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const fence = () => one(`SELECT token::int AS token, holder, acquired_at FROM genfill.throttle_leases WHERE release = $1`, [RELEASE]);
const heldBy = (w: Worker) => async () => {
  const f = await fence();
  return f && f.holder.includes(`:${w.child.pid}#`) && f;
};
/** The newest decision written by a worker process. */
const decisionBy = (w: Worker, afterId = 0) =>
  one(`SELECT id::int AS id, token::int AS token, at FROM genfill.throttle_decisions WHERE release = $1 AND holder LIKE $2 AND id > $3 ORDER BY id DESC LIMIT 1`, [
    RELEASE,
    `%:${w.child.pid}#%`,
    afterId,
  ]);

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  const r = firstGenerationRelease();
  r.release = RELEASE;
  r.dataset = 'orders_lease';
  r.target.table = 'public.orders_lease';
  r.range = { from: '2025-07-01T00:00:00Z', to: '2025-07-11T00:00:00Z' };
  expect((await cli('release', 'submit', writeRelease(workspace(), r))).code).toBe(0);
  expect((await cli('plan', RELEASE)).code).toBe(0);
  // Operator-paused: the release stays BUILDING with nothing built, so the controllers keep deciding.
  expect((await cli('pause', RELEASE)).code).toBe(0);
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  for (const c of children) {
    c.kill('SIGCONT');
    c.kill('SIGKILL');
  }
});

describe('throttle controller election', () => {
  it('hands the controller to another worker within one lease period after the holder is SIGKILLed', async () => {
    const a = worker();
    const held = await waitFor('worker a to hold the fence', heldBy(a));
    await waitFor('a decision by worker a', () => decisionBy(a));
    const b = worker();
    // b is up and standing by: its queue connection is visible before we kill a.
    await waitFor('two workers connected', async () => (await queues.queue(RELEASE).getWorkers()).length >= 2);
    a.child.kill('SIGKILL');
    const killedAt = Date.now();
    const took = await waitFor('worker b to take the fence', heldBy(b));
    const elapsed = Date.now() - killedAt;
    expect(took.token).toBe(held.token + 1);
    // The lease runs out at most LEASE_MS after a's last renewal; b tries once per interval.
    expect(elapsed).toBeLessThanOrEqual(LEASE_MS + INTERVAL_MS + 200);
    await waitFor('a decision by worker b under the new token', async () => {
      const d = await decisionBy(b);
      return d && d.token === took.token;
    });
    expect((await one(`SELECT operator_paused FROM genfill.releases WHERE id = $1`, [RELEASE])).operator_paused).toBe(true);
  });

  it('refuses the next decision of a holder that was SIGSTOPped past its lease and resumed', async () => {
    const c = worker();
    const holder = await waitFor('a current holder', async () => {
      const f = await fence();
      return f && [...children].find((ch) => f.holder.includes(`:${ch.pid}#`)) && f;
    });
    const stale = [...children].find((ch) => holder.holder.includes(`:${ch.pid}#`))!;
    const staleW: Worker = { child: stale, stderr: () => '' };
    let staleErr = '';
    stale.stderr!.on('data', (b: Buffer) => (staleErr += b.toString()));
    // Stop it between ticks, just after one of its decisions, so it wakes up believing it leads.
    const last = await waitFor('a decision by the holder', () => decisionBy(staleW));
    const next = await waitFor('its next decision', () => decisionBy(staleW, last.id));
    // Half an interval after that decision it is asleep until its next tick (positioning only).
    await new Promise((r) => setTimeout(r, Math.max(0, new Date(next.at).getTime() + INTERVAL_MS / 2 - Date.now())));
    stale.kill('SIGSTOP');
    const successor = c.child === stale ? [...children].find((ch) => ch !== stale)! : c.child;
    const took = await waitFor('the other worker to take the fence', heldBy({ child: successor, stderr: () => '' }));
    expect(took.token).toBe(holder.token + 1);
    stale.kill('SIGCONT');
    await waitFor('the stale holder to report its refused decision', async () => /refused by the fence/.test(staleErr));
    const refused = staleErr.split('\n').filter((l) => l.includes('refused by the fence')).map((l) => JSON.parse(l));
    expect(refused[0]).toMatchObject({ token: holder.token, currentToken: took.token, release: RELEASE });
    const written = await one(
      `SELECT count(*)::int AS n FROM genfill.throttle_decisions WHERE release = $1 AND token = $2 AND at >= $3`,
      [RELEASE, holder.token, took.acquired_at],
    );
    expect(written.n).toBe(0);
    // The successor keeps deciding under its own token.
    await waitFor('a decision under the new token', async () =>
      (await one(`SELECT count(*)::int AS n FROM genfill.throttle_decisions WHERE release = $1 AND token = $2`, [RELEASE, took.token])).n > 0,
    );
  });
});
