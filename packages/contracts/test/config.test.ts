import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/index.ts';

describe('configuration from the environment', () => {
  it('has the SPEC defaults when nothing is set', () => {
    const c = loadConfig({});
    expect(c.DATABASE_URL).toBe('postgres://postgres@127.0.0.1:5432/postgres');
    expect(c.REDIS_URL).toBe('redis://127.0.0.1:6379');
    expect(c.GENFILL_QUEUE_PREFIX).toBe('{genfill}');
    expect(c.GENFILL_RELEASE).toBeUndefined();
  });

  it('parses lists, durations and tokens', () => {
    const c = loadConfig({
      GENFILL_RELEASE: 'a@1, b@2',
      GENFILL_STATEMENT_TIMEOUT: '30s',
      GENFILL_LOCK_TIMEOUT: '500',
      GENFILL_METRICS_PORT: '9464',
      GENFILL_API_TOKENS: 'alice:operator:0123456789abcdef0123,bob:viewer:fedcba9876543210fedc',
      GENFILL_REPLICA_URLS: 'postgres://r1/db,postgres://r2/db',
    });
    expect(c.GENFILL_RELEASE).toEqual(['a@1', 'b@2']);
    expect(c.GENFILL_STATEMENT_TIMEOUT).toBe(30_000);
    expect(c.GENFILL_LOCK_TIMEOUT).toBe(500);
    expect(c.GENFILL_METRICS_PORT).toBe(9464);
    expect(c.GENFILL_API_TOKENS).toEqual([
      { subject: 'alice', role: 'operator', token: '0123456789abcdef0123' },
      { subject: 'bob', role: 'viewer', token: 'fedcba9876543210fedc' },
    ]);
    expect(c.GENFILL_REPLICA_URLS).toHaveLength(2);
  });

  it('parses GENFILL_API_TRUST_PROXY as express takes it: a flag, a hop count or proxy subnets', () => {
    expect(loadConfig({}).GENFILL_API_TRUST_PROXY).toBeUndefined();
    expect(loadConfig({ GENFILL_API_TRUST_PROXY: 'true' }).GENFILL_API_TRUST_PROXY).toBe(true);
    expect(loadConfig({ GENFILL_API_TRUST_PROXY: 'false' }).GENFILL_API_TRUST_PROXY).toBe(false);
    expect(loadConfig({ GENFILL_API_TRUST_PROXY: '2' }).GENFILL_API_TRUST_PROXY).toBe(2);
    expect(loadConfig({ GENFILL_API_TRUST_PROXY: 'loopback, 10.0.0.0/8,192.168.1.7, 172.16.0.0/255.240.0.0, fd00::/8' }).GENFILL_API_TRUST_PROXY).toEqual([
      'loopback',
      '10.0.0.0/8',
      '192.168.1.7',
      '172.16.0.0/255.240.0.0',
      'fd00::/8',
    ]);
  });

  it('reads GENFILL_TOMBSTONE_RETENTION as seconds, unset by default (the owner\'s setting stays as it is)', () => {
    expect(loadConfig({}).GENFILL_TOMBSTONE_RETENTION).toBeUndefined();
    expect(loadConfig({}).GENFILL_MAX_PENDING_EVENTS).toBeUndefined();
    expect(loadConfig({ GENFILL_TOMBSTONE_RETENTION: '24h' }).GENFILL_TOMBSTONE_RETENTION).toBe(86_400);
    expect(loadConfig({ GENFILL_TOMBSTONE_RETENTION: '30m' }).GENFILL_TOMBSTONE_RETENTION).toBe(1_800);
    expect(loadConfig({ GENFILL_TOMBSTONE_RETENTION: '90s' }).GENFILL_TOMBSTONE_RETENTION).toBe(90);
  });

  it('takes a Redis Cluster by its seed nodes as REDIS_URL', () => {
    expect(loadConfig({ REDIS_URL: 'redis+cluster://127.0.0.1:30001,127.0.0.1:30002' }).REDIS_URL).toBe('redis+cluster://127.0.0.1:30001,127.0.0.1:30002');
    expect(loadConfig({ REDIS_URL: 'rediss+cluster://user:secret@redis-0.redis:6379' }).REDIS_URL).toBe('rediss+cluster://user:secret@redis-0.redis:6379');
  });

  const bad: [string, string][] = [
    ['DATABASE_URL', 'mysql://x'],
    ['REDIS_URL', 'http://x'],
    ['REDIS_URL', 'redis+cluster://node-without-port'],
    ['REDIS_URL', 'redis+cluster://a:1/0'],
    ['GENFILL_QUEUE_PREFIX', 'a:b'],
    ['GENFILL_STATEMENT_TIMEOUT', 'soon'],
    ['GENFILL_LOCK_TIMEOUT', '-5'],
    ['GENFILL_METRICS_PORT', '70000'],
    ['GENFILL_API_TOKENS', 'alice:root:0123456789abcdef'],
    ['GENFILL_REPLICA_URLS', 'postgres://ok/db,nope'],
    ['GENFILL_MAX_PENDING_EVENTS', '0'],
    ['GENFILL_TOMBSTONE_RETENTION', '7 days'],
    ['GENFILL_TOMBSTONE_RETENTION', '0d'],
    ['GENFILL_LOG_LEVEL', 'loud'],
    ['GENFILL_API_TRUST_PROXY', 'yes'],
    ['GENFILL_API_TRUST_PROXY', 'loopback,proxy.internal'],
    ['GENFILL_API_TRUST_PROXY', '10.0.0.0/33'],
    ['GENFILL_API_TRUST_PROXY', '10.0.0.0/255.0.255.0'],
  ];
  for (const [name, value] of bad) {
    it(`refuses a malformed ${name} (${value}), naming the variable`, () => {
      let error: unknown;
      try {
        loadConfig({ [name]: value });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).problems[0]!.path).toBe(name);
      expect((error as ConfigError).exitCode).toBe(2);
    });
  }
});
