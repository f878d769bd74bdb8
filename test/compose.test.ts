// docker-compose.yml is for users without local services; no Docker engine runs in CI, so
// the file is checked by parsing it.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const compose = parse(readFileSync(new URL('../docker-compose.yml', import.meta.url), 'utf8'), { merge: true });

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

  it('has a fleet profile building the image and running api, planner, two workers, projector and reconciler after migrate', () => {
    const fleet = Object.entries(compose.services as Record<string, any>).filter(([name, svc]) => svc.profiles?.includes('fleet') && name !== 'logins');
    const byCommand = Object.fromEntries(fleet.map(([, svc]) => [svc.command[0], svc]));
    expect(Object.keys(byCommand).sort()).toEqual(['api', 'migrate', 'planner', 'projector', 'reconciler', 'worker']);
    expect(byCommand.worker.deploy.replicas).toBe(2);
    for (const [name, svc] of fleet) {
      expect(svc.build, name).toBe('.');
      expect(svc.read_only, `${name}: read-only root filesystem`).toBe(true);
      expect(svc.environment, name).toMatchObject({ DATABASE_URL: expect.stringMatching(/^postgres:\/\/\w+@postgres:5432\/postgres$/), REDIS_URL: 'redis://redis:6379', GENFILL_METRICS_PORT: '9464' });
      if (name === 'migrate') expect(svc.depends_on).toEqual({ postgres: { condition: 'service_healthy' }, redis: { condition: 'service_healthy' } });
      else expect(svc.depends_on, `${name} starts after its login is made`).toEqual({ logins: { condition: 'service_completed_successfully' } });
    }
    expect(compose.services.logins.depends_on).toEqual({ migrate: { condition: 'service_completed_successfully' } });
    // Only migrate connects as the superuser; every service as a plain login of its own, made by
    // the logins one-shot in genfill_service (the API: genfill_api), the reconciler's owner
    // connection a login in genfill_owner.
    const login = (svc: any, key = 'DATABASE_URL') => new URL(svc.environment[key]).username;
    expect(login(byCommand.migrate)).toBe('postgres');
    const made = Object.fromEntries(
      [...String(compose.services.logins.command.at(-1)).matchAll(/\('(\w+)', '(genfill_\w+)'\)/g)].map((m) => [m[1], m[2]]),
    );
    const users = ['api', 'planner', 'worker', 'projector', 'reconciler'].map((c) => login(byCommand[c]));
    expect(new Set(users).size, 'one login per service').toBe(5);
    for (const c of ['planner', 'worker', 'projector', 'reconciler']) expect(made[login(byCommand[c])], c).toBe('genfill_service');
    expect(made[login(byCommand.api)]).toBe('genfill_api');
    expect(made[login(byCommand.reconciler, 'GENFILL_OWNER_DATABASE_URL')]).toBe('genfill_owner');
    for (const c of ['api', 'planner', 'worker', 'projector']) expect(byCommand[c].environment.GENFILL_OWNER_DATABASE_URL, c).toBeUndefined();
    // The default `docker compose up` still starts PostgreSQL and Redis only.
    expect(compose.services.postgres.profiles).toBeUndefined();
    expect(compose.services.redis.profiles).toBeUndefined();
  });
});
