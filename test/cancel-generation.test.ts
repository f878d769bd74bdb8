// A cancelled release's rows stay in its candidate generation (issue 13, finding 3): nothing
// deletes them, so a later release planned into that generation would inherit them, and
// outside its range they would be findings no repair clears. `cancel` abandons the candidate
// when no other open release fills it; `plan` refuses a generation that is ABANDONED or holds
// a cancelled release's rows, and says to name a fresh generation.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildPartition, claimPartition } from '@genfill/builder';
import { createPool } from '@genfill/registry';
import { candidate, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { exampleRelease, registryCounts, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';

const tdb = await createTestDatabase('cancel_generation');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'cancel-generation-test', 4);
const q = createTestQueues('cancel-generation');
const env = { DATABASE_URL: tdb.url, REDIS_URL, GENFILL_QUEUE_PREFIX: q.prefix, GENFILL_LOG_LEVEL: 'silent' };
const cli = (...args: string[]) => runCli(args, env);

/** Submit (through the CLI) the example release over [from, to) into `generation`, daily partitions. */
async function submit(id: string, generation: string, from: string, to: string): Promise<void> {
  const r = exampleRelease();
  r.release = id;
  r.target.generation = generation;
  r.target.expectedActive = 'g2';
  r.range = { from, to };
  const res = await cli('release', 'submit', writeRelease(workspace(), r));
  expect(res.stderr).toBe('');
  expect(res.code).toBe(0);
}

async function plan(id: string): Promise<void> {
  const res = await cli('plan', id);
  expect(res.stderr).toBe('');
  expect(res.code).toBe(0);
}

/** Claim and build one partition in-process, as a worker would. */
async function buildOne(release: string, partition: string): Promise<void> {
  const c = await claimPartition(db, { release, partition, worker: 'test', leaseMs: 600_000 });
  if (c.kind !== 'claimed') throw new Error(`claim of ${partition} refused: ${JSON.stringify(c)}`);
  await buildPartition(db, { release, partition, attempt: c.attempt });
}

async function generationState(generation: string): Promise<string> {
  const { rows } = await db.query(`SELECT state FROM genfill.generations WHERE dataset = 'orders_enriched' AND generation = $1`, [generation]);
  return rows[0]?.state;
}

async function cancelLog(release: string) {
  const { rows } = await db.query(`SELECT from_state, to_state, detail FROM genfill.release_log WHERE release = $1 AND action = 'cancel'`, [release]);
  return rows;
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 48 });
});
beforeEach(() => {
  keepOnFailure(tdb);
  keepQueuesOnFailure(q);
});
afterAll(() => db.end());

describe('cancel abandons its candidate generation', () => {
  it('marks the generation ABANDONED when a release is cancelled after one partition, and says so in the cancel log', async () => {
    await submit('abandon@1', 'g9', '2025-07-01T00:00:00Z', '2025-07-04T00:00:00Z');
    await plan('abandon@1');
    await buildOne('abandon@1', 'b-20250701T000000Z');
    expect(Number((await db.query(`SELECT count(*) AS n FROM ${candidate('g9')}`)).rows[0].n)).toBe(48);

    const res = await cli('cancel', 'abandon@1', '--reason', 'wrong tax table');
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(await generationState('g9')).toBe('ABANDONED');
    expect(await cancelLog('abandon@1')).toEqual([
      // Three days of build partitions and two carry chunks (before and after the range).
      { from_state: 'BUILDING', to_state: 'CANCELLED', detail: expect.objectContaining({ abandonedGeneration: 'g9', partitions: { BUILT: 1, PENDING: 4 } }) },
    ]);
    // The adopted, active generation is untouched.
    expect(await generationState('g2')).toBe('ACTIVE');
  });

  it('refuses to plan a shorter release on that generation (exit 3), naming the cancelled release, and writes nothing', async () => {
    // Submit accepts it: overlap is checked only against releases that are not cancelled.
    await submit('abandon@2', 'g9', '2025-07-02T00:00:00Z', '2025-07-04T00:00:00Z');
    const before = await registryCounts(tdb.pool);
    const res = await cli('plan', 'abandon@2');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(
      /refused: generation g9 of dataset orders_enriched holds rows of cancelled release abandon@1 \(1 partition built before the cancel\) and is ABANDONED; release abandon@2 would inherit them: submit a new release naming a fresh generation \(target\.generation\) and plan that one/,
    );
    expect(await registryCounts(tdb.pool)).toEqual(before);
    expect((await db.query(`SELECT state FROM genfill.releases WHERE id = 'abandon@2'`)).rows[0].state).toBe('DRAFT');
    expect(await q.keys()).toEqual([]);
    // The cancelled release's rows are still where it left them; nothing was added.
    expect(Number((await db.query(`SELECT count(*) AS n FROM ${candidate('g9')}`)).rows[0].n)).toBe(48);
  });

  it('plans the same range into a fresh generation', async () => {
    await submit('abandon@3', 'g10', '2025-07-02T00:00:00Z', '2025-07-04T00:00:00Z');
    const res = await cli('plan', 'abandon@3', '--json');
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout)).toMatchObject({ status: 'planned', state: 'BUILDING', partitions: 4, carry: 2 });
    expect(await generationState('g10')).toBe('CANDIDATE');
  });

  it('refuses a generation abandoned before anything was built, naming the release whose cancel abandoned it', async () => {
    await submit('empty@1', 'g11', '2025-07-01T00:00:00Z', '2025-07-02T00:00:00Z');
    await plan('empty@1');
    expect((await cli('cancel', 'empty@1')).code).toBe(0);
    expect(await generationState('g11')).toBe('ABANDONED');
    await submit('empty@2', 'g11', '2025-07-02T00:00:00Z', '2025-07-03T00:00:00Z');
    const before = await registryCounts(tdb.pool);
    const res = await cli('plan', 'empty@2');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(
      /refused: generation g11 of dataset orders_enriched is ABANDONED \(release empty@1 was cancelled\); release empty@2 cannot build into it: submit a new release naming a fresh generation \(target\.generation\)/,
    );
    expect(await registryCounts(tdb.pool)).toEqual(before);
  });
});

describe('cancel while another release names the generation', () => {
  it('one open release per candidate: a second is refused at plan; cancelling the first keeps the generation for the second, and logs it', async () => {
    await submit('shared@1', 'g12', '2025-07-01T00:00:00Z', '2025-07-03T00:00:00Z');
    await submit('shared@2', 'g12', '2025-07-03T00:00:00Z', '2025-07-05T00:00:00Z');
    await plan('shared@1');
    const second = await cli('plan', 'shared@2');
    expect(second.code).toBe(3);
    expect(second.stderr).toMatch(/release shared@1 \(BUILDING\) is open on candidate generation g12: one open release per candidate/);
    await buildOne('shared@1', 'b-20250701T000000Z');

    expect((await cli('cancel', 'shared@1')).code).toBe(0);
    expect(await generationState('g12')).toBe('CANDIDATE');
    const [log] = await cancelLog('shared@1');
    expect(log.detail).toMatchObject({ generationKeptFor: ['shared@2'] });
    expect(log.detail).not.toHaveProperty('abandonedGeneration');
  });

  it('still refuses a new release on that generation: it holds the cancelled release\'s rows', async () => {
    await submit('shared@3', 'g12', '2025-07-01T00:00:00Z', '2025-07-02T00:00:00Z');
    const before = await registryCounts(tdb.pool);
    const res = await cli('plan', 'shared@3');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/generation g12 of dataset orders_enriched holds rows of cancelled release shared@1 \(1 partition built before the cancel\); release shared@3 would inherit them/);
    expect(await registryCounts(tdb.pool)).toEqual(before);
  });

  it('abandons the generation once the last open release on it is cancelled', async () => {
    // shared@3 is still a DRAFT on g12, so cancelling shared@2 (a DRAFT too) keeps it.
    expect((await cli('cancel', 'shared@2')).code).toBe(0);
    expect(await generationState('g12')).toBe('CANDIDATE');
    expect((await cancelLog('shared@2'))[0].detail).toMatchObject({ generationKeptFor: ['shared@3'] });
    expect((await cli('cancel', 'shared@3')).code).toBe(0);
    expect(await generationState('g12')).toBe('ABANDONED');
    expect((await cancelLog('shared@3'))[0].detail).toMatchObject({ abandonedGeneration: 'g12' });
  });
});
