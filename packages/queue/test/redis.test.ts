import { describe, expect, it } from 'vitest';
import { RedisUnavailableError } from '@genfill/contracts';
import { asRedisUnavailable, clusterTarget, connectRedis, warnIfEvicting, type Redis } from '../src/index.ts';
import { redisAddress } from '../src/redis.ts';

function fakeRedis(reply: () => unknown): Redis {
  return { call: async () => reply() } as unknown as Redis;
}

function collect() {
  const warnings: string[] = [];
  return { warnings, log: { warn: (_o: object, msg: string) => void warnings.push(msg) } };
}

describe('warnIfEvicting', () => {
  it('warns when Redis may evict queued jobs, in either reply shape', async () => {
    for (const reply of [['maxmemory-policy', 'allkeys-lru'], { 'maxmemory-policy': 'allkeys-lru' }]) {
      const { warnings, log } = collect();
      expect(await warnIfEvicting(fakeRedis(() => reply), log)).toBe('allkeys-lru');
      expect(warnings).toEqual([expect.stringMatching(/maxmemory-policy is allkeys-lru, not noeviction/)]);
    }
  });

  it('is silent for noeviction and tolerates a disabled CONFIG command', async () => {
    const { warnings, log } = collect();
    expect(await warnIfEvicting(fakeRedis(() => ['maxmemory-policy', 'noeviction']), log)).toBe('noeviction');
    expect(
      await warnIfEvicting(
        fakeRedis(() => {
          throw new Error("ERR unknown command 'CONFIG'");
        }),
        log,
      ),
    ).toBeNull();
    expect(warnings).toEqual([]);
  });
});

describe('Redis that does not answer', () => {
  it('names the address without credentials', () => {
    expect(redisAddress('redis://user:secret@cache.internal:6380/2')).toBe('cache.internal:6380/2');
    expect(redisAddress('redis://127.0.0.1')).toBe('127.0.0.1:6379');
  });

  it('names a Redis Cluster by its seed nodes, without credentials', () => {
    expect(redisAddress('redis+cluster://u:pw@10.0.0.1:6379,10.0.0.2:6380')).toBe('cluster 10.0.0.1:6379,10.0.0.2:6380');
  });

  it('fails fast with RedisUnavailableError naming the socket error', async () => {
    const err = await connectRedis('redis://127.0.0.1:1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RedisUnavailableError);
    expect((err as Error).message).toMatch(/^Redis at 127\.0\.0\.1:1 could not be reached \(connect ECONNREFUSED/);
  });

  it('recognises ioredis giving up as unavailability, and nothing else', () => {
    expect(asRedisUnavailable(Object.assign(new Error('Reached the max retries per request limit'), { name: 'MaxRetriesPerRequestError' }))).toBeInstanceOf(RedisUnavailableError);
    expect(asRedisUnavailable(new Error('Connection is closed.'))).toBeInstanceOf(RedisUnavailableError);
    expect(asRedisUnavailable(new Error('relation "genfill.releases" does not exist'))).toBeNull();
  });
});

describe('REDIS_URL for a Redis Cluster', () => {
  it('reads the seed nodes, credentials and TLS of redis+cluster:// and rediss+cluster://', () => {
    expect(clusterTarget('redis+cluster://127.0.0.1:30001,127.0.0.1:30002/')).toEqual({
      nodes: [
        { host: '127.0.0.1', port: 30001 },
        { host: '127.0.0.1', port: 30002 },
      ],
      tls: false,
    });
    expect(clusterTarget('rediss+cluster://svc:p%40ss@redis.genfill.svc:6379')).toEqual({
      nodes: [{ host: 'redis.genfill.svc', port: 6379 }],
      tls: true,
      username: 'svc',
      password: 'p@ss',
    });
  });

  it('leaves a single-server URL to the standalone client', () => {
    expect(clusterTarget('redis://127.0.0.1:6379')).toBeNull();
    expect(clusterTarget('rediss://cache:6380/1')).toBeNull();
  });
});
