// The demo's live order writer: what the old application keeps doing to public.orders while
// genfill works — new orders (some back-dated, some in the future), amount corrections, orders
// moved to another day, deletions — in small transactions at a steady rate. It works on orders
// it inserted itself (ids from 10^12 up, so it never collides with the seed) and, when
// `inRange` allows it, on seeded ones too.
//
// `inRange: false` keeps every write outside the release's range: until catch-up lands (the
// next step of the live path) a candidate built from snapshots cannot follow in-range writes,
// so the demo writes inside the range only once the build is proved.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from '@genfill/registry';
import { DEMO_RANGE, DEMO_WRITER_FIRST_ID } from './seed.ts';

export interface WriterStats {
  transactions: number;
  inserts: number;
  updates: number;
  moves: number;
  deletes: number;
  errors: number;
}

export interface OrderWriter {
  /** Allow (or stop) writes inside the release's range from now on. */
  setInRange(inRange: boolean): void;
  stats(): WriterStats;
  /** Stop after the transaction in flight; resolves with the totals. */
  stop(): Promise<WriterStats>;
}

const FIRST_ID = DEMO_WRITER_FIRST_ID;
const REGIONS = ['us-ca', 'us-tx', 'us-ny', 'ca-on', 'gb', 'de', 'fr', 'jp', 'us-or'];
const DAY = 86_400_000;
const FROM = Date.parse(DEMO_RANGE.from);
const TO = Date.parse(DEMO_RANGE.to);

/** A time outside [from, to): back-dated into 2024, or past the range (late rows, future-dated). */
function outsideRange(rand: () => number): Date {
  return rand() < 0.6 ? new Date(FROM - (1 + Math.floor(rand() * 400)) * DAY - Math.floor(rand() * DAY)) : new Date(TO + Math.floor(rand() * 60 * DAY));
}

function insideRange(rand: () => number): Date {
  return new Date(FROM + Math.floor(rand() * (TO - FROM)));
}

/** A small deterministic PRNG (mulberry32), so two runs write the same story. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export async function startOrderWriter(db: Db, o: { ratePerSecond: number; inRange: boolean; seededOrders?: number; seed?: number }): Promise<OrderWriter> {
  const rand = prng(o.seed ?? 42);
  const stats: WriterStats = { transactions: 0, inserts: 0, updates: 0, moves: 0, deletes: 0, errors: 0 };
  let inRange = o.inRange;
  let stopped = false;
  const mine: { id: number; at: Date }[] = [];
  // A second demo run goes on after the first one's orders.
  const { rows } = await db.query<{ next: string }>('SELECT (coalesce(max(order_id), $1) + 1)::text AS next FROM public.orders WHERE order_id >= $1', [FIRST_ID]);
  let next = Number(rows[0]!.next);
  const when = () => (inRange && rand() < 0.7 ? insideRange(rand) : outsideRange(rand));

  const step = async () => {
    const r = rand();
    if (mine.length < 20 || r < 0.4) {
      const at = when();
      const id = next++;
      await db.query(
        `INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES ($1, $2, $3, $4, $5)`,
        [id, 1 + Math.floor(rand() * 5000), REGIONS[Math.floor(rand() * REGIONS.length)], at, 99 + Math.floor(rand() * 50_000)],
      );
      mine.push({ id, at });
      stats.inserts++;
    } else if (r < 0.7) {
      // An amount correction: one of ours, or (in range allowed) a seeded order.
      const seeded = inRange && o.seededOrders && rand() < 0.5;
      const id = seeded ? 1 + Math.floor(rand() * o.seededOrders!) : mine[Math.floor(rand() * mine.length)]!.id;
      await db.query(`UPDATE public.orders SET amount_cents = amount_cents + $2 WHERE order_id = $1`, [id, 1 + Math.floor(rand() * 500)]);
      stats.updates++;
    } else if (r < 0.85) {
      // Moved to another day (and, in range allowed, across the range's edge).
      const i = Math.floor(rand() * mine.length);
      const at = inRange ? when() : outsideRange(rand);
      await db.query(`UPDATE public.orders SET created_at = $2 WHERE order_id = $1`, [mine[i]!.id, at]);
      mine[i]!.at = at;
      stats.moves++;
    } else {
      const i = Math.floor(rand() * mine.length);
      await db.query(`DELETE FROM public.orders WHERE order_id = $1`, [mine[i]!.id]);
      mine.splice(i, 1);
      stats.deletes++;
    }
    stats.transactions++;
  };

  const interval = 1000 / Math.max(1, o.ratePerSecond);
  const loop = (async () => {
    let due = performance.now();
    while (!stopped) {
      try {
        await step();
      } catch {
        stats.errors++;
      }
      due += interval;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      else if (wait < -1000) due = performance.now(); // fell behind: do not burst to catch up
    }
  })();

  return {
    setInRange: (v) => (inRange = v),
    stats: () => ({ ...stats }),
    stop: async () => {
      stopped = true;
      await loop;
      return { ...stats };
    },
  };
}
