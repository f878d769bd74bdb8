// `genfill seal <release>` and `genfill unseal <release>` (SPEC invariant 7), executed by the
// projector service as requests (README "Roles"): genfill.seal_epoch does the seal in one READ
// COMMITTED transaction — the exclusive seal lock with a short lock_timeout, the CAS OPEN →
// SEALED, then B read in a later statement. Here: the retries with backoff when the lock is
// not granted in time (naming the holder when they run out), and the bounded wait for the
// projector to pass every build watermark before B can contain them.
import { setTimeout as sleep } from 'node:timers/promises';
import { errorFromPg, LockNotAvailableError, ProjectorBehindError } from '@genfill/contracts';
import { withTransaction, type Db } from '@genfill/registry';

export interface SealOptions {
  /** Per attempt, the seal lock's lock_timeout (about a second). */
  lockTimeoutMs?: number;
  /** Attempts at the lock before giving up, with doubling backoff between them. */
  lockAttempts?: number;
  /** How long to wait for the projector to pass every watermark of the release. */
  waitForProjectorMs?: number;
}

export interface SealResult {
  release: string;
  dataset: string;
  epoch: number;
  generation: string;
  barrier: string;
  sealedFrom: string;
  /** Lock wait of the attempt that sealed, and attempts it took. */
  lockWaitMs: number;
  attempts: number;
  /** Time spent waiting for the projector to pass the watermarks. */
  waitedForProjectorMs: number;
}

/** Who holds (or waits for) the seal lock of a dataset: pids and what they run. */
async function sealLockHolders(db: Db, dataset: string): Promise<string> {
  const { rows } = await db.query<{ pid: number; mode: string; granted: boolean; app: string | null; state: string | null; query: string | null }>(
    `SELECT l.pid, l.mode, l.granted, a.application_name AS app, a.state, left(a.query, 80) AS query
       FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted
        AND ((l.classid::bigint << 32) | l.objid::bigint) = genfill.seal_key($1) AND l.objsubid = 1`,
    [dataset],
  );
  if (rows.length === 0) return 'no holder any more';
  return rows.map((r) => `pid ${r.pid} (${r.mode}, ${r.app ?? '?'}, ${r.state ?? '?'}: ${r.query ?? ''})`).join('; ');
}

export async function sealRelease(db: Db, release: string, o: SealOptions = {}): Promise<SealResult> {
  const lockTimeoutMs = o.lockTimeoutMs ?? 1000;
  const lockAttempts = o.lockAttempts ?? 5;
  const waitMs = o.waitForProjectorMs ?? 30_000;
  const waitStarted = performance.now();
  let attempts = 0;
  let backoff = 100;
  for (;;) {
    attempts += 1;
    try {
      const row = await withTransaction(db, async (conn) => {
        const { rows } = await conn.query<{ dataset: string; epoch: string; generation: string; barrier: string; sealed_from: string; lock_wait_ms: string }>(
          'SELECT * FROM genfill.seal_epoch($1, $2)',
          [release, lockTimeoutMs],
        );
        return rows[0]!;
      });
      return {
        release,
        dataset: row.dataset,
        epoch: Number(row.epoch),
        generation: row.generation,
        barrier: row.barrier,
        sealedFrom: row.sealed_from,
        lockWaitMs: Number(row.lock_wait_ms),
        attempts,
        waitedForProjectorMs: Math.round(performance.now() - waitStarted),
      };
    } catch (err) {
      const e = errorFromPg(err, { release });
      if (e instanceof LockNotAvailableError) {
        if (attempts >= lockAttempts) {
          const { rows } = await db.query<{ dataset: string }>('SELECT dataset FROM genfill.releases WHERE id = $1', [release]);
          const holders = rows[0] ? await sealLockHolders(db, rows[0].dataset) : '?';
          throw new LockNotAvailableError(
            `the seal lock of ${rows[0]?.dataset ?? '?'} was not granted within ${lockTimeoutMs} ms in ${attempts} attempts: held by ${holders}. ` +
              'Nothing was sealed; run seal again (a projector batch holds it only for its short tail — a long holder is a stuck session)',
            { cause: err },
          );
        }
        await sleep(backoff);
        backoff = Math.min(2000, backoff * 2);
        continue;
      }
      if (e instanceof ProjectorBehindError) {
        if (performance.now() - waitStarted >= waitMs) {
          throw new ProjectorBehindError(
            `${e.message}, after waiting ${Math.round(waitMs / 1000)} s: the projector is behind (or not running). Nothing was sealed; ` +
              `see \`genfill status --dataset\` for its lag, and run seal again. Partitions: ${JSON.stringify(e.partitions) ?? '?'}`,
            e.partitions,
            { cause: err },
          );
        }
        await sleep(200);
        continue;
      }
      throw e;
    }
  }
}

export interface UnsealResult {
  release: string;
  dataset: string;
  epoch: number;
  state: string;
}

export async function unsealRelease(db: Db, release: string, reason: string | null): Promise<UnsealResult> {
  try {
    return await withTransaction(db, async (conn) => {
      const { rows } = await conn.query<{ dataset: string; epoch: string; state: string }>('SELECT * FROM genfill.unseal_epoch($1, $2)', [release, reason]);
      return { release, dataset: rows[0]!.dataset, epoch: Number(rows[0]!.epoch), state: rows[0]!.state };
    });
  } catch (err) {
    throw errorFromPg(err, { release });
  }
}
