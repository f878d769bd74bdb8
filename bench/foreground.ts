// bench/foreground: the foreground bench/throttle protects — an application running pgbench's
// TPC-B transaction at a fixed rate over pg, as a service Prometheus scrapes. It exports the
// transactions' latency as a prom-client histogram on /metrics (the SLI the throttle reads
// through GENFILL_FOREGROUND_QUERY) and keeps every latency it measured, so the bench judges
// each arm on the exact p95 of the foreground's own transactions, not on Prometheus' estimate.
//
//   node --import tsx bench/foreground.ts --url postgres://…/db [--rate 100] [--clients 4] [--port 0]
//
// Prints one JSON line `{ "port": n, "scale": s }` on stdout once it listens and runs.
//   GET  /metrics  the histogram (and nothing else: no default metrics, one small scrape)
//   POST /mark     the latencies (ms) and errors since the last mark, as JSON; starts a new mark
// Arrivals are a Poisson process at --rate (as pgbench -R schedules them) served by --clients
// connections; a transaction's latency runs from its scheduled start, so time spent waiting for
// a free connection while the database stalls counts, as it does for a customer.
// Runs until SIGTERM. Not part of npm test.
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Histogram, Registry } from 'prom-client';

const { values: args } = parseArgs({
  options: {
    url: { type: 'string' },
    rate: { type: 'string', default: '100' },
    clients: { type: 'string', default: '4' },
    port: { type: 'string', default: '0' },
  },
});
if (!args.url) throw new Error('bench/foreground: --url postgres://… is required');
const RATE = Number(args.rate);
const CLIENTS = Number(args.clients);
/** Scheduled transactions waiting for a connection beyond this are dropped (and counted): a stalled database must not grow memory without bound. */
const MAX_PENDING = 10_000;

const METRIC = 'foreground_transaction_duration_seconds';
const registry = new Registry();
const latency = new Histogram({
  name: METRIC,
  help: "Latency of the bench foreground's TPC-B transactions, from their scheduled start",
  // Fine around the baseline (2–5 ms on the bench's machine) and the budgets above it:
  // histogram_quantile interpolates linearly inside a bucket, so coarse buckets would hide a
  // 25% change of the p95.
  buckets: [
    0.0005, 0.00075, 0.001, 0.00125, 0.0015, 0.00175, 0.002, 0.00225, 0.0025, 0.00275, 0.003, 0.00325, 0.0035, 0.00375, 0.004, 0.0045, 0.005,
    0.0055, 0.006, 0.007, 0.008, 0.009, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5,
  ],
  registers: [registry],
});

const clients = await Promise.all(
  Array.from({ length: CLIENTS }, async () => {
    const c = new pg.Client({ connectionString: args.url, application_name: 'bench-foreground' });
    c.on('error', () => undefined);
    await c.connect();
    return c;
  }),
);
const scale = Number((await clients[0]!.query<{ n: string }>('SELECT count(*)::text AS n FROM pgbench_branches')).rows[0]!.n);
if (!(scale > 0)) throw new Error('bench/foreground: pgbench_branches is empty; run pgbench -i first');

const int = (lo: number, hi: number) => lo + Math.floor(Math.random() * (hi - lo + 1));

/** pgbench's built-in tpcb-like script, a round trip per statement. */
async function tpcb(c: pg.Client): Promise<void> {
  const aid = int(1, 100_000 * scale);
  const bid = int(1, scale);
  const tid = int(1, 10 * scale);
  const delta = int(-5000, 5000);
  await c.query('BEGIN');
  try {
    await c.query({ name: 'acc', text: 'UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2', values: [delta, aid] });
    await c.query({ name: 'sel', text: 'SELECT abalance FROM pgbench_accounts WHERE aid = $1', values: [aid] });
    await c.query({ name: 'tel', text: 'UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2', values: [delta, tid] });
    await c.query({ name: 'bra', text: 'UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2', values: [delta, bid] });
    await c.query({
      name: 'his',
      text: 'INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)',
      values: [tid, bid, aid, delta],
    });
    await c.query('END');
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

let samples: number[] = [];
let errors = 0;
let dropped = 0;
const pending: number[] = [];
const idle = [...clients];

function pump(): void {
  while (idle.length > 0 && pending.length > 0) {
    const c = idle.pop()!;
    const scheduledAt = pending.shift()!;
    void tpcb(c)
      .catch(() => void errors++)
      .finally(() => {
        const ms = performance.now() - scheduledAt;
        samples.push(ms);
        latency.observe(ms / 1000);
        idle.push(c);
        pump();
      });
  }
}

let stopped = false;
let next = performance.now();
let timer: NodeJS.Timeout | undefined;
function schedule(): void {
  if (stopped) return;
  const now = performance.now();
  while (next <= now) {
    if (pending.length < MAX_PENDING) pending.push(next);
    else dropped++;
    next += (-Math.log(1 - Math.random()) * 1000) / RATE;
  }
  pump();
  timer = setTimeout(schedule, Math.max(0, next - performance.now()));
}
schedule();

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/metrics') {
    void registry.metrics().then((text) => {
      res.writeHead(200, { 'content-type': registry.contentType });
      res.end(text);
    });
  } else if (req.method === 'POST' && req.url === '/mark') {
    const out = { samples, errors, dropped };
    samples = [];
    errors = 0;
    dropped = 0;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(out));
  } else {
    res.writeHead(404).end();
  }
});
server.listen(Number(args.port), '127.0.0.1', () => {
  const addr = server.address();
  process.stdout.write(`${JSON.stringify({ port: typeof addr === 'object' && addr ? addr.port : null, scale })}\n`);
});

process.once('SIGTERM', () => {
  stopped = true;
  clearTimeout(timer);
  server.close();
  void Promise.all(clients.map((c) => c.end().catch(() => undefined))).finally(() => process.exit(0));
});
