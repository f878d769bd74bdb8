// docker-compose.yml is for users without local services; no Docker engine runs in CI, so
// the file is checked by parsing it.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const compose = parse(readFileSync(new URL('../docker-compose.yml', import.meta.url), 'utf8'));

describe('docker-compose.yml', () => {
  it('runs PostgreSQL 15 on the default DATABASE_URL port with trust auth', () => {
    const pg = compose.services.postgres;
    expect(pg.image).toMatch(/^postgres:15(\.|$|-)/);
    expect(pg.ports).toContain('127.0.0.1:5432:5432');
    expect(pg.environment.POSTGRES_HOST_AUTH_METHOD).toBe('trust');
  });

  it('runs Redis 7 with noeviction and AOF, as BullMQ needs', () => {
    const redis = compose.services.redis;
    expect(redis.image).toMatch(/^redis:7(\.|$|-)/);
    expect(redis.ports).toContain('127.0.0.1:6379:6379');
    const args: string[] = redis.command;
    expect(args[args.indexOf('--maxmemory-policy') + 1]).toBe('noeviction');
    expect(args[args.indexOf('--appendonly') + 1]).toBe('yes');
  });
});
