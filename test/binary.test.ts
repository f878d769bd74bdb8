// The real binary, as a newcomer runs it after `npm ci`.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const BIN = new URL('../apps/cli/bin/genfill.js', import.meta.url).pathname;

describe('the genfill binary', () => {
  it('prints help listing the verbs and exits 0', async () => {
    const { stdout } = await run('node', [BIN, '--help']);
    for (const verb of ['migrate', 'release', 'plan', 'status']) expect(stdout).toContain(verb);
    expect(stdout).toMatch(/Exit codes: 0 ok, 1 internal error, 2 invalid input, 3 refused/);
  });

  it('exits 2 naming the variable when the environment is malformed', async () => {
    const err = await run('node', [BIN, 'status'], { env: { ...process.env, GENFILL_METRICS_PORT: 'abc' } }).catch((e) => e);
    expect(err.code).toBe(2);
    expect(err.stderr).toMatch(/GENFILL_METRICS_PORT/);
  });

  it('exits 1 with a clear message when the database cannot be reached', async () => {
    const err = await run('node', [BIN, 'status'], { env: { ...process.env, DATABASE_URL: 'postgres://postgres@127.0.0.1:1/postgres' } }).catch((e) => e);
    expect(err.code).toBe(1);
    expect(err.stderr).toMatch(/cannot reach the database \(ECONNREFUSED\).*DATABASE_URL/);
  });
});
