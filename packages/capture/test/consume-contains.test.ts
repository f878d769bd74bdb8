// Snapshot containment and visibility in TypeScript agree with the database's own functions
// (genfill.snapshot_contains, pg_visible_in_snapshot, pg_snapshot's input) on random
// snapshots, and mean what their names say over the visible sets. Small xid universes make
// equal, overlapping and nested snapshots frequent.
import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool, migrate } from '@genfill/registry';
import { contains, formatSnapshot, parseSnapshot, type Snapshot, snapshotContains, visibleIn } from '../src/index.ts';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';

const tdb = await createTestDatabase('consume_contains');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'consume-contains-test', 2);

beforeAll(async () => {
  await migrate(db);
}, 120_000);
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

const UNIVERSE = 20;

/** Any snapshot pg_snapshot accepts, with xids in [1, UNIVERSE]. */
const anySnapshot: fc.Arbitrary<Snapshot> = fc
  .tuple(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 0, max: 7 }), fc.array(fc.boolean(), { minLength: 7, maxLength: 7 }))
  .map(([xmin, width, bits]) => ({
    xmin: BigInt(xmin),
    xmax: BigInt(xmin + width),
    xip: bits.slice(0, width).flatMap((b, i) => (b ? [BigInt(xmin + i)] : [])),
  }));

/** A snapshot as PostgreSQL takes them: xmin is the oldest in progress (or xmax), xmax − 1 has completed. */
const takenSnapshot: fc.Arbitrary<Snapshot> = fc
  .tuple(fc.integer({ min: 2, max: 14 }), fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }), fc.integer({ min: 0, max: 6 }))
  .map(([xmax, bits, span]) => {
    const xip = bits.slice(0, Math.min(span, xmax - 2)).flatMap((b, i) => (b ? [BigInt(xmax - 2 - i)] : [])).reverse();
    return { xmin: xip[0] ?? BigInt(xmax), xmax: BigInt(xmax), xip };
  });

const visibleSet = (s: Snapshot) => Array.from({ length: UNIVERSE + 1 }, (_, i) => BigInt(i)).filter((x) => visibleIn(x, s));
const subset = (a: bigint[], b: bigint[]) => a.every((x) => b.includes(x));

describe('snapshot containment', () => {
  it('agrees with genfill.snapshot_contains on random pairs, both answers occurring', async () => {
    const answers = { true: 0, false: 0 };
    await fc.assert(
      fc.asyncProperty(fc.oneof(anySnapshot, takenSnapshot), fc.oneof(anySnapshot, takenSnapshot), async (b, a) => {
        const sql = await snapshotContains(db, formatSnapshot(b), formatSnapshot(a));
        answers[String(sql) as 'true' | 'false']++;
        expect(contains(b, a)).toBe(sql);
      }),
      { numRuns: 400 },
    );
    expect(Math.min(answers.true, answers.false)).toBeGreaterThan(40);
  });

  it('is sound: whatever A sees, a snapshot containing A sees', () => {
    fc.assert(
      fc.property(anySnapshot, anySnapshot, (b, a) => {
        if (contains(b, a)) expect(subset(visibleSet(a), visibleSet(b))).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('is complete for snapshots PostgreSQL takes: seeing everything A sees is containing A', () => {
    fc.assert(
      fc.property(takenSnapshot, takenSnapshot, (b, a) => {
        expect(contains(b, a)).toBe(subset(visibleSet(a), visibleSet(b)));
      }),
      { numRuns: 2000 },
    );
  });

  it('is reflexive and transitive', () => {
    fc.assert(
      fc.property(anySnapshot, anySnapshot, anySnapshot, (a, b, c) => {
        expect(contains(a, a)).toBe(true);
        if (contains(c, b) && contains(b, a)) expect(contains(c, a)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('snapshot text and visibility', () => {
  it('accepts exactly what pg_snapshot accepts and prints it as PostgreSQL does', async () => {
    const accepted = { yes: 0, no: 0 };
    const text = fc
      .tuple(fc.integer({ min: 0, max: 6 }), fc.integer({ min: 0, max: 8 }), fc.array(fc.integer({ min: 0, max: 9 }), { maxLength: 4 }))
      .map(([xmin, xmax, xip]) => `${xmin}:${xmax}:${xip.join(',')}`);
    // One client: a pool replaces the client of every failed query, which costs a connection each.
    const c = await db.connect();
    await fc.assert(
      fc.asyncProperty(text, async (t) => {
        const pg = await c.query<{ s: string }>(`SELECT $1::pg_snapshot::text AS s`, [t]).then(
          (r) => r.rows[0]!.s,
          () => null,
        );
        let ours: string | null;
        try {
          ours = formatSnapshot(parseSnapshot(t));
        } catch {
          ours = null;
        }
        accepted[pg === null ? 'no' : 'yes']++;
        expect(ours).toBe(pg);
      }),
      { numRuns: 300 },
    ).finally(() => c.release());
    expect(Math.min(accepted.yes, accepted.no)).toBeGreaterThan(20);
  });

  it('agrees with pg_visible_in_snapshot', async () => {
    await fc.assert(
      fc.asyncProperty(anySnapshot, fc.integer({ min: 1, max: UNIVERSE }), async (s, x) => {
        const { rows } = await db.query<{ v: boolean }>(`SELECT pg_visible_in_snapshot($1::xid8, $2::pg_snapshot) AS v`, [String(x), formatSnapshot(s)]);
        expect(visibleIn(BigInt(x), s)).toBe(rows[0]!.v);
      }),
      { numRuns: 300 },
    );
  });

  it('the consumption query’s index prefilter keeps every event visible in S and not in F', () => {
    // (txid >= xmax(F) OR txid ∈ xip(F)) AND txid < xmax(S) is implied by the exact test, so
    // adding it for the index loses nothing.
    fc.assert(
      fc.property(anySnapshot, anySnapshot, fc.integer({ min: 1, max: UNIVERSE }), (f, s, n) => {
        const x = BigInt(n);
        const exact = visibleIn(x, s) && !visibleIn(x, f);
        const prefilter = (x >= f.xmax || f.xip.includes(x)) && x < s.xmax;
        if (exact) expect(prefilter).toBe(true);
      }),
      { numRuns: 5000 },
    );
  });
});
