// Snapshots as consumers, watermarks and barriers use them (SPEC invariants 4, 6, 8, 15): the
// text form of pg_snapshot parsed into numbers, visibility and containment over it, and the
// one SQL helper that asks the database the same question (genfill.snapshot_contains,
// migration 0009). The TypeScript `contains` exists so code that orders frontiers (the
// containment-minimum of watermarks, a barrier that must contain every watermark) need not
// round-trip; consume-contains.test.ts checks it agrees with the SQL function on random
// snapshots.
import { InvalidInputError } from '@genfill/contracts';
import type { Conn } from '@genfill/registry';

/** A pg_snapshot: transactions below xmin are finished, from xmax on not started, xip in progress. */
export interface Snapshot {
  xmin: bigint;
  xmax: bigint;
  /** In progress when the snapshot was taken: ascending, each in [xmin, xmax). */
  xip: readonly bigint[];
}

/**
 * A snapshot that sees no transaction (every real xid is ≥ 3 > xmax = 1): a first
 * consumption from it returns every event still in the log. PostgreSQL rejects `0:0:`.
 */
export const GENESIS_SNAPSHOT = '1:1:';

/** `xmin:xmax:xip,…` → Snapshot, refusing what pg_snapshot's own input refuses. */
export function parseSnapshot(text: string): Snapshot {
  const bad = (why: string) => new InvalidInputError([{ path: 'snapshot', message: `${JSON.stringify(text)} is not a pg_snapshot: ${why}` }]);
  const m = /^(\d+):(\d+):((?:\d+(?:,\d+)*)?)$/.exec(text.trim());
  if (!m) throw bad('expected xmin:xmax:xip1,xip2,…');
  const xmin = BigInt(m[1]!);
  const xmax = BigInt(m[2]!);
  if (xmin < 1n) throw bad('xmin must be at least 1');
  if (xmax < xmin) throw bad('xmax is below xmin');
  const xip: bigint[] = [];
  for (const part of m[3] ? m[3].split(',') : []) {
    const x = BigInt(part);
    if (x < xmin || x >= xmax) throw bad(`in-progress xid ${x} is outside [xmin, xmax)`);
    const last = xip.at(-1);
    if (last !== undefined && x < last) throw bad('in-progress xids must be ascending');
    if (last !== x) xip.push(x); // PostgreSQL drops duplicates too
  }
  return { xmin, xmax, xip };
}

export function formatSnapshot(s: Snapshot): string {
  return `${s.xmin}:${s.xmax}:${s.xip.join(',')}`;
}

/** pg_visible_in_snapshot: committed (or aborted) before the snapshot was taken. */
export function visibleIn(xid: bigint, s: Snapshot): boolean {
  if (xid < s.xmin) return true;
  if (xid >= s.xmax) return false;
  return !s.xip.includes(xid);
}

/**
 * B contains A (everything A sees, B sees), exactly as genfill.snapshot_contains defines it:
 * xmax(A) ≤ xmax(B) and every transaction in progress in B below xmax(A) is in progress in A.
 * Sound for any pair; also complete for the snapshots PostgreSQL takes, whose xmax − 1 (the
 * latest completed transaction) is never in progress.
 */
export function contains(b: Snapshot, a: Snapshot): boolean {
  if (a.xmax > b.xmax) return false;
  const inA = new Set(a.xip);
  return b.xip.every((x) => x >= a.xmax || inA.has(x));
}

/** The database's answer (genfill.snapshot_contains) to whether snapshot `b` contains `a`. */
export async function snapshotContains(conn: Pick<Conn, 'query'>, b: string, a: string): Promise<boolean> {
  const { rows } = await conn.query<{ c: boolean }>(`SELECT genfill.snapshot_contains($1::pg_snapshot, $2::pg_snapshot) AS c`, [b, a]);
  return rows[0]!.c;
}

/**
 * The containment-minimum of snapshots: the largest snapshot every one of them contains — it
 * sees a transaction only when all of them do. xmax is the smallest xmax; a transaction below it
 * is in progress when any of them has it in progress.
 */
export function containmentMinimum(snapshots: readonly Snapshot[]): Snapshot {
  if (snapshots.length === 0) throw new Error('containmentMinimum of no snapshots');
  const xmax = snapshots.reduce((m, s) => (s.xmax < m ? s.xmax : m), snapshots[0]!.xmax);
  const xip = [...new Set(snapshots.flatMap((s) => s.xip.filter((x) => x < xmax)))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const lowest = snapshots.reduce((m, s) => (s.xmin < m ? s.xmin : m), snapshots[0]!.xmin);
  const xmin = xip.length > 0 && xip[0]! < lowest ? xip[0]! : lowest < xmax ? lowest : xmax;
  return { xmin, xmax, xip };
}
