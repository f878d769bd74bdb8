// The Prometheus SLI signal against a server speaking Prometheus' instant-query API.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrometheusSignal } from '../src/signals.ts';

let server: Server;
let base = '';
const asked: string[] = [];
// What the server answers, by query.
const answers: Record<string, { status: number; body: unknown }> = {
  scalar: { status: 200, body: { status: 'success', data: { resultType: 'scalar', result: [1700000000, '12.5'] } } },
  vector: {
    status: 200,
    body: { status: 'success', data: { resultType: 'vector', result: [{ metric: { job: 'a' }, value: [1, '8'] }, { metric: { job: 'b' }, value: [1, '31.25'] }, { metric: {}, value: [1, 'NaN'] }] } },
  },
  empty: { status: 200, body: { status: 'success', data: { resultType: 'vector', result: [] } } },
  bad: { status: 400, body: { status: 'error', errorType: 'bad_data', error: 'parse error at char 4' } },
  matrix: { status: 200, body: { status: 'success', data: { resultType: 'matrix', result: [] } } },
};

beforeAll(async () => {
  server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    const q = url.searchParams.get('query') ?? '';
    asked.push(`${url.pathname}?${q}`);
    const a = answers[q] ?? answers.bad!;
    res.writeHead(a.status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(a.body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/prom`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const read = (query: string) => new PrometheusSignal(base, query).read();

describe('PrometheusSignal', () => {
  it('reads a scalar in milliseconds from /api/v1/query under the base path', async () => {
    expect(await read('scalar')).toMatchObject({ name: 'foreground_sli', value: 12.5 });
    expect(asked).toContain('/prom/api/v1/query?scalar');
  });

  it('takes the worst finite series of a vector', async () => {
    expect(await read('vector')).toMatchObject({ value: 31.25, detail: { series: 3 } });
  });

  it('reads nothing (null, with the reason) for an empty result, an error, a range result or no server', async () => {
    expect(await read('empty')).toMatchObject({ value: null, detail: { error: 'the query returned no finite value' } });
    expect(await read('bad')).toMatchObject({ value: null, detail: { error: 'parse error at char 4' } });
    expect(await read('matrix')).toMatchObject({ value: null, detail: { error: expect.stringMatching(/scalar or an instant vector, got matrix/) } });
    const gone = await new PrometheusSignal('http://127.0.0.1:9', 'scalar', 500).read();
    expect(gone.value).toBeNull();
    expect(gone.detail.error).toEqual(expect.any(String));
  });
});
