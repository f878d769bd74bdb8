// A reconciler that sees live changes (SPEC invariant 10, live half): under a writer that never
// stops, a candidate kept current by catch-up reconciles (exit 0) with the keys changed after
// its catch-up frontier reported as pending, not as findings; one candidate row damaged by hand
// still blocks it (exit 4) naming the key.
import { join } from 'node:path';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { projectDataset } from '@genfill/projector';
import { createPool } from '@genfill/registry';
import { startOrderWriter, type OrderWriter } from '../apps/cli/src/demo/writer.ts';
import { builtRelease, candidate, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { workspace } from './support/fixtures.ts';
import { catchupRound } from '@genfill/switch';

const tdb = await createTestDatabase('reconcile_live');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'reconcile-live-test', 8);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('reconcile-live-test', 'silent');
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-03T00:00:00Z';
// The writer corrects seeded orders 1…100 only; 150 (2025-07-02, inside the range) is never touched by it.
const DAMAGED = 150;
const drain = () => projectDataset('orders_enriched', { db, log, untilIdle: true, id: 'reconcile-live', leaseMs: 60_000 });

let writer: OrderWriter;

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 3, perDay: 96 });
  await builtRelease(db, { id: 'live@1', generation: 'g3', from: FROM, to: TO });
});
beforeEach(() => keepOnFailure(tdb));

describe('reconciliation under a writer that never stops', () => {
  it('exits 0 with the keys changed after the catch-up frontier pending, not findings', async () => {
    writer = await startOrderWriter(db, { ratePerSecond: 60, inRange: true, seededOrders: 100, seed: 11 });
    try {
      for (let i = 0; i < 3; i++) {
        await new Promise((r) => setTimeout(r, 300));
        await drain();
        await catchupRound(db, 'live@1');
      }
      // The writer goes on while the reconciler reads: what it writes now is pending.
      await new Promise((r) => setTimeout(r, 300));
      const res = await runCli(['reconcile', 'live@1', '--json'], env);
      expect(res.stderr).toBe('');
      expect(res.code).toBe(0);
      const out = JSON.parse(res.stdout);
      expect(out).toMatchObject({ state: 'RECONCILED', findings: { count: 0 } });
      expect(out.summary.live).toMatchObject({ rounds: 3 });
      expect(out.summary.live.pendingKeys).toBeGreaterThan(0);
      expect(writer.stats().transactions).toBeGreaterThan(20);
    } finally {
      await writer.stop();
    }
  });

  it('exits 4 naming the key when one candidate row is damaged by hand, with the writer still going', async () => {
    writer = await startOrderWriter(db, { ratePerSecond: 60, inRange: true, seededOrders: 100, seed: 12 });
    try {
      await drain();
      await catchupRound(db, 'live@1');
      await db.query(`UPDATE ${candidate('g3')} SET tax_cents = tax_cents + 1 WHERE order_id = $1`, [DAMAGED]);
      const res = await runCli(['reconcile', 'live@1', '--json', '--findings-out', join(workspace(), 'findings.ndjson')], env);
      expect(res.code).toBe(4);
      const out = JSON.parse(res.stdout);
      expect(out.state).toBe('RECONCILIATION_REQUIRED');
      // Every finding naming a key names the damaged one (the partition's receipt may disagree too).
      const keys = out.findings.first.filter((f: { key: unknown }) => f.key !== null).map((f: { key: { order_id: number } }) => f.key.order_id);
      expect(keys).toContain(DAMAGED);
      expect(new Set(keys)).toEqual(new Set([DAMAGED]));
    } finally {
      await writer.stop();
    }
  });
});
