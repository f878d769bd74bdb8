// `genfill status` on a ten-year hourly release (issue 19, part 1): 87,672 partitions. By
// default the answer is a summary computed in SQL — counts, failed and running partitions as
// ranges, the slowest built ones — so `status --json` stays small however many partitions a
// release has; `--partitions [STATUS]` pages through them. No timing is asserted here: the
// figures live in bench/status.ts.
import { planRelease } from '@genfill/planner';
import { createPool } from '@genfill/registry';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from './support/fixtures.ts';

const tdb = await createTestDatabase('status_scale');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'status-scale-test');
const env = { DATABASE_URL: tdb.url, GENFILL_LOG_LEVEL: 'silent' };
const cli = (...args: string[]) => runCli(args, env);
const RELEASE = 'hourly-10y@1';
/** 2015-07-01 to 2025-07-01 in UTC: 3,653 days (three 29 Februaries) of 24 hours. */
const PARTITIONS = 87_672;

async function statusJson(...args: string[]) {
  const res = await cli('status', RELEASE, '--json', ...args);
  expect(res.stderr).toBe('');
  expect(res.code).toBe(0);
  return { bytes: Buffer.byteLength(res.stdout), body: JSON.parse(res.stdout) };
}

/** Sets partitions' status by seq range as the superuser, past the registry's triggers: only a test does this. */
async function mark(status: 'FAILED' | 'RUNNING', from: number, to: number, reason: string | null): Promise<void> {
  const c = await tdb.pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('ALTER TABLE genfill.partitions DISABLE TRIGGER USER');
    await c.query(`UPDATE genfill.partitions SET status = $2, reason = $3, attempt = 1 WHERE release = $1 AND seq BETWEEN $4 AND $5`, [RELEASE, status, reason, from, to]);
    await c.query('ALTER TABLE genfill.partitions ENABLE TRIGGER USER');
    await c.query('COMMIT');
  } finally {
    c.release();
  }
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(tdb.pool);
  const r = firstGenerationRelease();
  Object.assign(r, { release: RELEASE, range: { from: '2015-07-01T00:00:00Z', to: '2025-07-01T00:00:00Z' }, timezone: 'UTC', partition: { every: 'PT1H' } });
  const submitted = await cli('release', 'submit', writeRelease(workspace(), r));
  expect(submitted.stderr).toBe('');
  // The manifest without Redis: planRelease writes the partitions; nothing is enqueued or built.
  await planRelease(db, RELEASE);
}, 300_000);
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('status of a ten-year hourly release', () => {
  it('answers a summary under 2 MB by default: every partition counted, none listed', async () => {
    const { bytes, body } = await statusJson();
    expect(bytes).toBeLessThan(2 * 1024 * 1024);
    expect(body.manifest.partitions).toBe(PARTITIONS);
    expect(body.counts).toEqual({ PENDING: PARTITIONS });
    expect(body.summary).toEqual({
      byKind: { build: { PENDING: PARTITIONS } },
      failed: { ranges: [], totalRanges: 0, moreRanges: 0 },
      running: { ranges: [], totalRanges: 0, moreRanges: 0 },
      slowest: [],
    });
    expect(body.partitions).toBeUndefined();
    expect(body.page).toBeUndefined();
    expect(body.history.map((h: { action: string }) => h.action)).toEqual(['submit', 'plan']);
    expect(body.historyTotal).toBe(2);
  });

  it('pages through the partitions of one status by seq', async () => {
    const { body } = await statusJson('--partitions', 'PENDING', '--page', '3', '--page-size', '500');
    expect(body.page).toEqual({ number: 3, size: 500, total: PARTITIONS, pages: Math.ceil(PARTITIONS / 500), status: 'PENDING' });
    expect(body.partitions).toHaveLength(500);
    // seq counts from 0: the 1,001st to the 1,500th partitions are seq 1000 to 1499.
    expect(body.partitions.map((p: { seq: number }) => p.seq)).toEqual(Array.from({ length: 500 }, (_, i) => 1000 + i));
    // seq 1000 starts 1,000 hours after 2015-07-01T00:00Z: 41 days and 16 hours later.
    expect(body.partitions[0]).toMatchObject({ id: 'b-20150811T160000Z', lower: '2015-08-11T16:00:00.000Z', upper: '2015-08-11T17:00:00.000Z', status: 'PENDING', receipt: null });
    const last = await statusJson('--partitions', '--page', String(Math.ceil(PARTITIONS / 10_000)), '--page-size', '10000');
    expect(last.body.partitions).toHaveLength(PARTITIONS % 10_000);
    expect(last.body.partitions.at(-1)).toMatchObject({ seq: PARTITIONS - 1, id: 'b-20250630T230000Z' });
    const text = await cli('status', RELEASE, '--partitions', '--page', '2', '--page-size', '3');
    expect(text.stdout).toMatch(/partitions {2}all: page 2 of 29224 \(3 a page, 87672 in all\)\n {2}seq {2}partition +kind +status +attempt +rows +ms +reason\n {4}3 {2}b-20150701T030000Z {2}build {2}PENDING/);
  });

  it('shows failed and running partitions as ranges of consecutive ones with their first reason', async () => {
    await mark('FAILED', 0, 71, 'DEPENDENCY_CHANGED');
    await mark('FAILED', 4999, 4999, 'TRANSFORM_ERROR');
    await mark('FAILED', 87_599, 87_671, 'TRANSFORM_ERROR');
    await mark('FAILED', 87_649, 87_671, 'LEASE_LOST');
    await mark('RUNNING', 99, 108, null);
    const { bytes, body } = await statusJson();
    expect(bytes).toBeLessThan(2 * 1024 * 1024);
    expect(body.counts).toEqual({ PENDING: PARTITIONS - 72 - 1 - 73 - 10, FAILED: 146, RUNNING: 10 });
    expect(body.summary.failed).toEqual({
      ranges: [
        { first: 'b-20150701T000000Z', last: 'b-20150703T230000Z', seq: { first: 0, last: 71 }, partitions: 72, reason: 'DEPENDENCY_CHANGED', attempt: 1, reasons: 1 },
        { first: expect.any(String), last: expect.any(String), seq: { first: 4999, last: 4999 }, partitions: 1, reason: 'TRANSFORM_ERROR', attempt: 1, reasons: 1 },
        { first: expect.any(String), last: 'b-20250630T230000Z', seq: { first: 87_599, last: 87_671 }, partitions: 73, reason: 'TRANSFORM_ERROR', attempt: 1, reasons: 2 },
      ],
      totalRanges: 3,
      moreRanges: 0,
    });
    expect(body.summary.running).toMatchObject({ ranges: [{ seq: { first: 99, last: 108 }, partitions: 10, reason: null }], totalRanges: 1 });
    const text = (await cli('status', RELEASE)).stdout;
    expect(text).toMatch(/ {2}FAILED {2}b-20150701T000000Z … b-20150703T230000Z \(72 partitions\), attempt 1: DEPENDENCY_CHANGED\n/);
    expect(text).toMatch(/: TRANSFORM_ERROR \(and 1 other reason\)\n/);
    expect(text).toMatch(/ {2}RUNNING b-20150705T030000Z … b-20150705T120000Z \(10 partitions\)/);
    const failed = await statusJson('--partitions', 'failed', '--page-size', '100');
    expect(failed.body.page).toMatchObject({ total: 146, pages: 2, status: 'FAILED' });
    expect(failed.body.partitions.map((p: { seq: number }) => p.seq).slice(70, 74)).toEqual([70, 71, 4999, 87_599]);
  });

  it('caps the ranges at 20, then says how many more', async () => {
    // Every other partition from seq 20,001 to 20,100 failed: 50 ranges of one.
    const c = await tdb.pool.connect();
    try {
      await c.query('BEGIN');
      await c.query('ALTER TABLE genfill.partitions DISABLE TRIGGER USER');
      await c.query(`UPDATE genfill.partitions SET status = 'FAILED', reason = 'TIMEOUT', attempt = 2 WHERE release = $1 AND seq BETWEEN 20001 AND 20100 AND seq % 2 = 1`, [RELEASE]);
      await c.query('ALTER TABLE genfill.partitions ENABLE TRIGGER USER');
      await c.query('COMMIT');
    } finally {
      c.release();
    }
    const { body } = await statusJson();
    expect(body.summary.failed.ranges).toHaveLength(20);
    expect(body.summary.failed).toMatchObject({ totalRanges: 53, moreRanges: 33 });
    const text = (await cli('status', RELEASE)).stdout;
    expect(text).toMatch(new RegExp(`… and 33 more failed ranges: genfill status ${RELEASE} --partitions FAILED`));
  });

  it('keeps the latest 100 history entries with their count, and a requeue of every partition as its first 20', async () => {
    // Log rows written as the superuser (the log is append-only; nothing here rewrites it):
    // 150 throttle pauses, then one requeue naming every partition, as plan would log it.
    await tdb.pool.query(
      `INSERT INTO genfill.release_log (release, action, detail) SELECT $1, 'throttle-pause', jsonb_build_object('n', k) FROM generate_series(1, 150) AS k`,
      [RELEASE],
    );
    await tdb.pool.query(
      `INSERT INTO genfill.release_log (release, action, detail)
       SELECT $1, 'requeue', jsonb_build_object('partitions', jsonb_agg(id ORDER BY seq), 'previous', jsonb_object_agg(id, 'FAILED: TIMEOUT'))
         FROM genfill.partitions WHERE release = $1`,
      [RELEASE],
    );
    const { bytes, body } = await statusJson();
    expect(bytes).toBeLessThan(2 * 1024 * 1024);
    expect(body.historyTotal).toBe(2 + 150 + 1);
    expect(body.history).toHaveLength(100);
    expect(body.history[0]).toMatchObject({ action: 'throttle-pause', detail: { n: 52 } });
    expect(body.history.at(-1)).toMatchObject({
      action: 'requeue',
      detail: { partitions: Array.from({ length: 20 }, (_, i) => `b-20150701T${String(i).padStart(2, '0')}0000Z`), partitionCount: PARTITIONS, truncated: true },
    });
    expect(body.history.at(-1).detail.previous).toBeUndefined();
    expect((await cli('status', RELEASE)).stdout).toMatch(/history {5}\(the latest 100 of 153 entries\)/);
  });

  it('refuses a bad listing with exit 2 and prints nothing', async () => {
    for (const args of [
      ['--partitions', 'DONE'],
      ['--partitions', '--page-size', '10001'],
      ['--partitions', '--page', '0'],
      ['--page', '2'],
    ]) {
      const res = await cli('status', RELEASE, '--json', ...args);
      expect(res.code, args.join(' ')).toBe(2);
      expect(res.stdout).toBe('');
    }
    const res = await cli('status', RELEASE, '--partitions', 'DONE', '--page-size', 'x');
    expect(res.stderr).toMatch(/--partitions: expected one of PENDING, RUNNING, BUILT, FAILED or all, got 'DONE'/);
    expect(res.stderr).toMatch(/--page-size: expected a whole number from 1 to 10,000, got 'x'/);
    expect((await cli('status', '--partitions')).code).toBe(2);
  });
});
