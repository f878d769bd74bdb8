// `genfill reconciler`: every interval, reconcile each release that is BUILT (once per
// round, one at a time: a reconciliation already reads with two connections). A release
// that fails moves to RECONCILIATION_REQUIRED and is not picked again until a repair
// rebuilds it to BUILT; one that passes moves to RECONCILED. Errors are logged, never fatal.
import { RefusedError } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import type { Db } from '@genfill/registry';
import { reconcile, type ReconcileOptions, type ReconcileResult } from './reconcile.ts';

export interface ReconcilerServiceOptions {
  db: Db;
  log: Logger;
  intervalMs: number;
  /** Passed to every reconciliation (findingsDir, connections, …). */
  reconcile?: Omit<ReconcileOptions, 'log' | 'findingsOut'>;
}

export interface RoundResult {
  reconciled: ReconcileResult[];
  failed: { release: string; error: string }[];
}

export interface ReconcilerService {
  /** Run one round now (also what the timer runs). */
  runOnce(): Promise<RoundResult>;
  close(): Promise<void>;
}

async function builtReleases(db: Db): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM genfill.releases WHERE state = 'BUILT' ORDER BY state_changed_at, id`);
  return rows.map((r) => r.id);
}

export function startReconcilerService(o: ReconcilerServiceOptions): ReconcilerService {
  const log = o.log.child({ service: 'reconciler' });
  let closing = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<RoundResult> | undefined;

  const round = async (): Promise<RoundResult> => {
    const out: RoundResult = { reconciled: [], failed: [] };
    for (const release of await builtReleases(o.db)) {
      if (closing) break;
      try {
        const r = await reconcile(o.db, release, { ...o.reconcile, log });
        out.reconciled.push(r);
        log.info({ release, reconciliation: r.id, state: r.state, findings: r.findings.count, path: r.findings.path }, 'release reconciled');
      } catch (err) {
        // A lost race (the release moved meanwhile) is normal; the next round looks again.
        const level = err instanceof RefusedError ? 'info' : 'error';
        log[level]({ release, err: (err as Error).message }, 'reconciliation did not complete');
        out.failed.push({ release, error: (err as Error).message });
      }
    }
    return out;
  };

  const runOnce = (): Promise<RoundResult> => {
    // One round at a time: the timer and a caller never reconcile the same release twice at once.
    running ??= round().finally(() => (running = undefined));
    return running;
  };

  const schedule = () => {
    if (closing) return;
    timer = setTimeout(() => {
      runOnce()
        .catch((err) => log.error({ err: (err as Error).message }, 'reconciler round failed'))
        .finally(schedule);
    }, o.intervalMs);
  };
  schedule();

  return {
    runOnce,
    close: async () => {
      closing = true;
      if (timer) clearTimeout(timer);
      await running?.catch(() => undefined);
    },
  };
}
