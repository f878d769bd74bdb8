// `genfill worker` refuses a half-configured throttle signal before it connects to anything.
import { describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';

// A database URL nothing listens on: the refusal must come before any connection.
const env = { DATABASE_URL: 'postgres://nobody@127.0.0.1:9/none', REDIS_URL: 'redis://127.0.0.1:9' };

describe('genfill worker configuration', () => {
  it('needs GENFILL_FOREGROUND_QUERY with GENFILL_PROMETHEUS_URL, and the other way round', async () => {
    const a = await runCli(['worker'], { ...env, GENFILL_PROMETHEUS_URL: 'http://prometheus:9090' });
    expect(a.code).toBe(2);
    expect(a.stderr).toMatch(/GENFILL_FOREGROUND_QUERY.*is required with GENFILL_PROMETHEUS_URL/);
    const b = await runCli(['worker'], { ...env, GENFILL_FOREGROUND_QUERY: 'vector(1)' });
    expect(b.code).toBe(2);
    expect(b.stderr).toMatch(/GENFILL_PROMETHEUS_URL.*is required with GENFILL_FOREGROUND_QUERY/);
  });

  it('refuses a Prometheus URL that is not http(s)', async () => {
    const c = await runCli(['worker'], { ...env, GENFILL_PROMETHEUS_URL: 'ftp://prometheus', GENFILL_FOREGROUND_QUERY: 'vector(1)' });
    expect(c.code).toBe(2);
    expect(c.stderr).toMatch(/GENFILL_PROMETHEUS_URL/);
  });
});
