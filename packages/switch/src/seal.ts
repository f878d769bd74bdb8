// `genfill seal <release>` and `genfill unseal <release>` (SPEC invariant 7), executed by the
// projector service as requests (README "Roles"): genfill.seal_epoch does the seal in one READ
// COMMITTED transaction — the exclusive seal lock with a short timeout, the CAS OPEN →
// SEALED, then B read in a later statement. Here: the retries with backoff when the lock is
// not granted in time (naming the holder when they run out), and the bounded wait for the
// projector to pass every build watermark before B can contain them.
//
// The seal lock is LOCK TABLE … IN EXCLUSIVE MODE on the dataset's table in schema genfill_lock
// (genfill.take_lock), which only genfill's processes can take: a login outside genfill can no
// longer hold the seal off (issue 28). Each attempt's wait ends after lockTimeoutMs with
// LockWaitTimeoutError; after lockAttempts the seal refuses with the holders it last saw, and
// the epoch stays OPEN.
import { setTimeout as sleep } from 'node:timers/promises';
import { errorFromPg, LockNotAvailableError, LockWaitTimeoutError, ProjectorBehindError } from '@genfill/contracts';
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
          const w = e instanceof LockWaitTimeoutError ? e : null;
          const holders = w ? w.holders.map((h) => `pid ${h.pid} (${h.mode}, ${h.application || '?'})`).join('; ') || 'no holder any more' : '?';
          throw new LockWaitTimeoutError(
            `the seal lock of ${w?.key ?? '?'} was not granted within ${lockTimeoutMs} ms in ${attempts} attempts: held by ${holders}. ` +
              'Nothing was sealed; run seal again (a projector batch holds it only for its short tail — a long holder is a stuck session: ' +
              'pg_terminate_backend(<pid>) ends it)',
            'seal',
            w?.key ?? '?',
            lockTimeoutMs,
            w?.holders ?? [],
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
