// The demo's live path: the order writer (writer.ts) and the projector, running in this process
// from adopt to the end, and the check that closes it — once the writer stops and the projector
// drains, the view equals the active generation's transform map applied to the source, row for
// row (the reconciler's drift check): before the cutover the adopt transform everywhere, after
// it the release's fixed transform inside its range and the adopt transform outside.
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '@genfill/observability';
import { projectDataset, projectorStatus } from '@genfill/projector';
import { driftCheck } from '@genfill/reconcile';
import { createPool } from '@genfill/registry';
import type { Context } from '../context.ts';
import { startOrderWriter, type WriterStats } from './writer.ts';

const DATASET = 'orders_enriched';

export interface LiveResult {
  writer: WriterStats;
  projector: { batches: number; events: number; applied: number; fenced: number; lagP95Ms: number; lagMaxMs: number };
  /** Rows where the view and the transform map of the source disagree (both directions). */
  differences: number;
  /** The generation the view read at the end. */
  generation: string;
}

export interface LivePath {
  /** From now on the writer also writes inside the release's range. */
  writeInRange(): void;
  /** Keep writing `seconds` more, stop the writer, drain the projector, compare the view with the transform map. */
  finish(o: { seconds: number }): Promise<LiveResult>;
  stop(): Promise<void>;
}

function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]!;
}

/**
 * `projectorUrl` is the fleet's plain login the projector runs as; the writer is the
 * application, on the demo's own connection.
 */
export async function startLivePath(ctx: Context, o: { seededOrders: number; ratePerSecond: number; projectorUrl: string }): Promise<LivePath> {
  const pool = createPool({ ...ctx.config, DATABASE_URL: o.projectorUrl }, 'genfill-demo-projector', 4, { fleet: true });
  const app = createPool(ctx.config, 'genfill-demo-writer', 2);
  const log = createLogger('projector', 'warn');
  const controller = new AbortController();
  const totals = { batches: 0, events: 0, applied: 0, fenced: 0 };
  const projector = projectDataset(DATASET, {
    db: pool,
    log,
    signal: controller.signal,
    pollMs: 50,
    onBatch: (b) => {
      if (b.kind === 'applied') {
        totals.batches++;
        totals.events += b.counts.events;
        totals.applied += b.counts.upserted + b.counts.flagged + b.counts.remembered;
      } else if (b.kind === 'fenced') totals.fenced++;
    },
  }).catch((err: unknown) => log.error({ err }, 'demo projector failed'));
  const writer = await startOrderWriter(app, { ratePerSecond: o.ratePerSecond, inRange: false, seededOrders: o.seededOrders });
  // Lag: the age of the oldest event not yet in the frontier, sampled every 100 ms.
  const lags: number[] = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const s = await projectorStatus(pool, DATASET).catch(() => null);
      if (s) lags.push(s.lagSeconds * 1000);
      await sleep(100);
    }
  })();
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await writer.stop();
    sampling = false;
    await sampler;
    controller.abort();
    await projector;
    await pool.end();
    await app.end();
  };
  return {
    stop,
    writeInRange: () => writer.setInRange(true),
    finish: async ({ seconds }) => {
      await sleep(seconds * 1000);
      const w = await writer.stop();
      // Drain: wait until nothing is pending (the projector keeps running).
      for (let i = 0; i < 600; i++) {
        const s = await projectorStatus(pool, DATASET);
        if (s && s.pendingEvents === 0) break;
        await sleep(100);
      }
      sampling = false;
      await sampler;
      const drift = await driftCheck(pool, DATASET);
      const result: LiveResult = {
        writer: w,
        projector: { ...totals, lagP95Ms: Math.round(percentile(lags, 0.95)), lagMaxMs: Math.round(Math.max(0, ...lags)) },
        differences: drift.missing + drift.extra + drift.pending,
        generation: drift.generation,
      };
      await stop();
      return result;
    },
  };
}
