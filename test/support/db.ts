// Each test file gets its own database, dropped after success and left behind for
// inspection after a failure (the pg-boss habit of one schema per test).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, onTestFailed } from 'vitest';

const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  name: string;
  url: string;
  /** A pool on the test database as the admin user. */
  pool: pg.Pool;
  /** Mark the file as failed so the database is kept. */
  keep(): void;
}

function urlFor(name: string): string {
  const u = new URL(ADMIN_URL);
  u.pathname = `/${name}`;
  return u.toString();
}

/** Call at the top level of a test file (it registers its own afterAll). */
export async function createTestDatabase(label: string): Promise<TestDatabase> {
  const name = `gf_${label.replace(/[^a-z0-9]/gi, '_').toLowerCase().slice(0, 30)}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    // Two login roles for tests that need a second principal (.ci/run creates them too).
    for (const role of ['genfill_alice', 'genfill_bob']) {
      await admin.query(
        `DO $$ BEGIN CREATE ROLE ${role} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`,
      );
    }
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const pool = new pg.Pool({ connectionString: urlFor(name), max: 4 });
  // An idle client killed by the final DROP … WITH (FORCE) must not fail the file.
  pool.on('error', () => undefined);
  let failed = false;
  const db: TestDatabase = { name, url: urlFor(name), pool, keep: () => (failed = true) };
  afterAll(async () => {
    await pool.end();
    if (failed) {
      process.stderr.write(`kept test database ${name} for inspection\n`);
      return;
    }
    const a = new pg.Client({ connectionString: ADMIN_URL });
    await a.connect();
    try {
      await a.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await a.end();
    }
  });
  return db;
}

/** Register inside each test (or a beforeEach) so a failure keeps the database. */
export function keepOnFailure(db: TestDatabase): void {
  onTestFailed(() => db.keep());
}

/** A connection string for another login role on the test database (no password: trust auth). */
export function urlAs(db: { url: string }, login: string): string {
  const u = new URL(db.url);
  u.username = login;
  u.password = '';
  return u.toString();
}
