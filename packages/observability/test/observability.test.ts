import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, createMetricsRegistry, type Readiness, scoped, serveMetrics } from '../src/index.ts';

describe('observability', () => {
  it('logs JSON lines carrying the service and the unit of work scope keys', () => {
    const lines: string[] = [];
    const sink = new Writable({ write: (chunk, _enc, cb) => (lines.push(String(chunk)), cb()) });
    const log = scoped(createLogger('worker', 'info', sink), { release: 'r@1', partition: 'b-20250701T000000Z', attempt: 2 });
    log.info({ rows: 10 }, 'partition built');
    const entry = JSON.parse(lines[0]!);
    expect(entry).toMatchObject({ service: 'worker', release: 'r@1', partition: 'b-20250701T000000Z', attempt: 2, rows: 10, msg: 'partition built' });
  });

  it('gives each process its own metrics registry with genfill_ names and the service label', async () => {
    const a = createMetricsRegistry('planner');
    const b = createMetricsRegistry('worker');
    expect(a).not.toBe(b);
    const text = await a.metrics();
    expect(text).toMatch(/^genfill_process_\w+\{service="planner"\}/m);
  });
});

describe('the metrics port', () => {
  it('answers /healthz while alive and /readyz with 200 or 503 naming each failed check', async () => {
    let ready = true;
    const server = await serveMetrics(createMetricsRegistry('worker'), {
      port: 0,
      host: '127.0.0.1',
      health: {
        ready: async (): Promise<Readiness> =>
          ready
            ? { ok: true, checks: { postgres: { ok: true, ms: 1 } } }
            : { ok: false, reason: 'draining', checks: { postgres: { ok: true, ms: 1 }, redis: { ok: false, ms: 2, error: 'PING timed out' } } },
      },
    });
    try {
      const base = `http://127.0.0.1:${server.port}`;
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      const up = await fetch(`${base}/readyz`);
      expect(up.status).toBe(200);
      expect(await up.json()).toMatchObject({ status: 'ready', failed: [] });
      ready = false;
      const down = await fetch(`${base}/readyz`);
      expect(down.status).toBe(503);
      expect(await down.json()).toMatchObject({ status: 'unavailable', reason: 'draining', failed: ['redis'], checks: { redis: { error: 'PING timed out' } } });
      // Liveness does not follow readiness: a draining process must not be restarted.
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      expect((await fetch(`${base}/metrics`)).status).toBe(200);
      expect((await fetch(`${base}/other`)).status).toBe(404);
    } finally {
      await server.close();
    }
  });

  it('serves only /metrics when no health routes are given', async () => {
    const server = await serveMetrics(createMetricsRegistry('planner'), { port: 0, host: '127.0.0.1' });
    try {
      expect((await fetch(`http://127.0.0.1:${server.port}/healthz`)).status).toBe(404);
    } finally {
      await server.close();
    }
  });
});
