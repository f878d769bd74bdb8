import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, createMetricsRegistry, scoped } from '../src/index.ts';

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
