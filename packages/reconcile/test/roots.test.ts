// Roots are (count, sum of 64-bit row hashes mod 2^64): order-independent like XOR, but a
// duplicated pair does not cancel, and a part can be subtracted from a whole (bisection).
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool, migrate } from '@genfill/registry';
import { hashOf, root, rootOf, rootOfHashes, sameRoot, subtractRoot, addRoots, MOD_64 } from '../src/roots.ts';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';

const tdb = await createTestDatabase('roots');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'roots-test');
beforeAll(() => migrate(db));
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

const xor = (hs: bigint[]) => hs.reduce((a, h) => a ^ BigInt.asUintN(64, h), 0n);

describe('root arithmetic', () => {
  const a = -8_070_450_532_247_928_832n; // signed, as genfill.row_hash returns
  const b = 4_611_686_018_427_387_904n;
  const c = 1_234_567_890_123n;

  it('distinguishes {a, b, b} from {a, c, c}, which XOR does not', () => {
    expect(xor([a, b, b])).toBe(xor([a, c, c]));
    expect(sameRoot(rootOfHashes([a, b, b]), rootOfHashes([a, c, c]))).toBe(false);
  });

  it('is order-independent and unsigned mod 2^64', () => {
    const r = rootOfHashes([a, b, c]);
    expect(sameRoot(r, rootOfHashes([c, a, b]))).toBe(true);
    expect(r.sum >= 0n && r.sum < MOD_64).toBe(true);
    expect(r.count).toBe(3n);
  });

  it('subtracts a part from its whole, which bisection relies on', () => {
    const whole = rootOfHashes([a, b, c, b]);
    const left = rootOfHashes([a, b]);
    expect(subtractRoot(whole, left)).toEqual(rootOfHashes([c, b]));
    expect(addRoots(left, rootOfHashes([c, b]))).toEqual(whole);
  });
});

describe('roots in SQL', () => {
  const sqlRoot = async (values: string[]) => {
    const { rows } = await db.query<{ n: string; r: string; x: string; hs: string[] }>(
      `SELECT count(*)::text AS n, ${rootOf(hashOf(['v'], 't'))} AS r, bit_xor(${hashOf(['v'], 't')})::text AS x,
              array_agg(${hashOf(['v'], 't')}::text) AS hs
         FROM unnest($1::text[]) AS t(v)`,
      [values],
    );
    return rows[0]!;
  };

  it('distinguishes {a, b, b} from {a, c, c} with genfill.row_hash, where bit_xor does not', async () => {
    const abb = await sqlRoot(['a', 'b', 'b']);
    const acc = await sqlRoot(['a', 'c', 'c']);
    expect(abb.x).toBe(acc.x);
    expect(abb.r).not.toBe(acc.r);
  });

  it('computes in SQL exactly the root the arithmetic gives for the same hashes', async () => {
    const r = await sqlRoot(['a', 'b', 'c', '', 'ä']);
    expect(root(r.n, r.r)).toEqual(rootOfHashes(r.hs));
    expect((await sqlRoot([])).r).toBe('0');
  });
});
